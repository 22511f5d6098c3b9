def two_sum(nums, target):
    first_index = {}
    for j, value in enumerate(nums)
        need = target - value
        if need in first_index:
            return (first_index[need], j)
        if value not in first_index:
            first_index[value] = j
    return None
