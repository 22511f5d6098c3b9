import random

from solution import two_sum


def _expected(nums, target):
    for j in range(len(nums)):
        for i in range(j):
            if nums[i] + nums[j] == target:
                return (i, j)
    return None


def test_fixed_lists():
    assert two_sum([0, 0], 0) == (0, 1)
    assert two_sum([1, 2, 3, 4], 7) == (2, 3)
    assert two_sum([5, -5, 5], 0) == (0, 1)
    assert two_sum([4, 1, 4], 8) == (0, 2)
    assert two_sum([1, 2, 3], 100) is None
    assert two_sum([6], 12) is None


def test_random_lists():
    for _ in range(200):
        nums = [random.randint(-8, 8) for _ in range(random.randint(0, 10))]
        target = random.randint(-10, 10)
        assert two_sum(nums, target) == _expected(nums, target)
