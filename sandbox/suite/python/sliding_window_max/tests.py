from solution import sliding_window_max


def test_example():
    assert sliding_window_max([1, 3, -1, -3, 5, 3, 6, 7], 3) == [3, 3, 5, 5, 6, 7]


def test_whole_and_single():
    assert sliding_window_max([4, 2, 9], 3) == [9]
    assert sliding_window_max([4, 2, 9], 1) == [4, 2, 9]


def test_invalid_k():
    assert sliding_window_max([1, 2], 3) == []
    assert sliding_window_max([1, 2], 0) == []
    assert sliding_window_max([], 1) == []


def test_decreasing():
    assert sliding_window_max([9, 8, 7, 6, 5], 2) == [9, 8, 7, 6]
