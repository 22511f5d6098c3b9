import random

from leap_testing import raises
from solution import kth_smallest


def test_duplicates_and_negatives():
    assert kth_smallest([2, 2, 2, 1], 3) == 2
    assert kth_smallest([-5, 0, -10, 3], 1) == -10
    assert kth_smallest([-5, 0, -10, 3], 4) == 3
    assert kth_smallest([1.5, -0.5, 0.25], 2) == 0.25


def test_invalid_k_other_sizes():
    for nums, k in (([], 1), ([], 0), ([9, 9], 3), ([4], 2), ([4], -2)):
        with raises("ValueError"):
            kth_smallest(nums, k)


def test_random_lists_unchanged():
    for _ in range(150):
        nums = [random.randint(-50, 50) for _ in range(random.randint(1, 25))]
        copy = list(nums)
        k = random.randint(1, len(nums))
        assert kth_smallest(nums, k) == sorted(copy)[k - 1]
        assert nums == copy
