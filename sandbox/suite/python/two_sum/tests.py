from solution import two_sum


def test_basic():
    assert two_sum([2, 7, 11, 15], 9) == (0, 1)


def test_smallest_j_then_smallest_i():
    assert two_sum([3, 2, 4, 1, 5], 6) == (1, 2)
    assert two_sum([1, 1, 5], 6) == (0, 2)
    assert two_sum([3, 3, 3], 6) == (0, 1)


def test_no_self_pairing():
    assert two_sum([3, 4], 6) is None
    assert two_sum([5], 10) is None


def test_negative_and_empty():
    assert two_sum([-3, 8, 4, -1], 3) == (2, 3)
    assert two_sum([], 0) is None
