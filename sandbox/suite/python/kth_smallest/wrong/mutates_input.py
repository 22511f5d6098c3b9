def kth_smallest(nums, k):
    if not 1 <= k <= len(nums):
        raise ValueError("k out of range")
    nums.sort()
    return nums[k - 1]
