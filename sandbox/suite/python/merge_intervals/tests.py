from solution import merge_intervals


def test_overlapping_unsorted():
    assert merge_intervals([[8, 10], [1, 3], [2, 6], [15, 18]]) == [[1, 6], [8, 10], [15, 18]]


def test_touching_and_nested():
    assert merge_intervals([[1, 2], [2, 3]]) == [[1, 3]]
    assert merge_intervals([[1, 10], [2, 3], [4, 5]]) == [[1, 10]]


def test_empty():
    assert merge_intervals([]) == []


def test_input_unchanged():
    data = [[5, 7], [1, 6]]
    merge_intervals(data)
    assert data == [[5, 7], [1, 6]]
