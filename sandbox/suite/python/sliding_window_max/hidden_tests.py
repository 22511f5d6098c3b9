import random

from solution import sliding_window_max


def test_fixed_windows():
    assert sliding_window_max([1, 2, 3, 4, 5], 2) == [2, 3, 4, 5]
    assert sliding_window_max([5, 5, 5], 2) == [5, 5]
    assert sliding_window_max([-1, -3, -2], 2) == [-1, -2]
    assert sliding_window_max([2, 1], 2) == [2]
    assert sliding_window_max([7], 1) == [7]
    assert sliding_window_max([3, 1], -1) == []


def test_random_lists():
    for _ in range(200):
        nums = [random.randint(-9, 9) for _ in range(random.randint(0, 15))]
        k = random.randint(-1, 17)
        want = [max(nums[i:i + k]) for i in range(len(nums) - k + 1)] if 0 < k <= len(nums) else []
        assert sliding_window_max(nums, k) == want


def test_long():
    nums = list(range(60000, 0, -1))
    assert sliding_window_max(nums, 500) == list(range(60000, 499, -1))
