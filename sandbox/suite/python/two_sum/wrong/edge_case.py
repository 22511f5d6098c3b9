def two_sum(nums, target):
    seen = {}
    for j, value in enumerate(nums):
        seen.setdefault(value, j)
        need = target - value
        if need in seen:
            return (seen[need], j)
    return None
