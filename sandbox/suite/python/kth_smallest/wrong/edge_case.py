def kth_smallest(nums, k):
    return sorted(nums)[k - 1]
