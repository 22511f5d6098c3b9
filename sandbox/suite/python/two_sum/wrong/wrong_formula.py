def two_sum(nums, target):
    seen = set()
    for value in nums:
        if target - value in seen:
            return (target - value, value)
        seen.add(value)
    return None
