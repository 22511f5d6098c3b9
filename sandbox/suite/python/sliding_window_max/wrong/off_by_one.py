def sliding_window_max(nums, k):
    if k <= 0 or k > len(nums):
        return []
    return [max(nums[i:i + k]) for i in range(len(nums) - k)]
