from leap_testing import raises
from solution import kth_smallest


def test_examples():
    assert kth_smallest([3, 2, 1, 5, 6, 4], 2) == 2
    assert kth_smallest([3, 2, 3, 1, 2, 4, 5, 5, 6], 4) == 3


def test_bounds():
    assert kth_smallest([7], 1) == 7
    assert kth_smallest([4, 1, 3], 3) == 4


def test_invalid_k():
    for k in (0, 4, -1):
        with raises("ValueError"):
            kth_smallest([1, 2, 3], k)


def test_input_unchanged():
    data = [5, 1, 4]
    assert kth_smallest(data, 1) == 1
    assert data == [5, 1, 4]
