def kth_smallest(nums, k):
    if not 1 <= k <= len(nums):
        raise ValueError("k out of range")
    return sorted(nums)[k]
