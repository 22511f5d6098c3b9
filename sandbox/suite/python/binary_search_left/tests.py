from solution import binary_search_left


def test_present_and_duplicates():
    assert binary_search_left([1, 3, 5, 7], 5) == 2
    assert binary_search_left([1, 2, 2, 2, 3], 2) == 1


def test_absent():
    assert binary_search_left([1, 3, 5, 7], 4) == 2
    assert binary_search_left([1, 3, 5, 7], 0) == 0
    assert binary_search_left([1, 3, 5, 7], 9) == 4


def test_empty_and_large():
    assert binary_search_left([], 1) == 0
    big = list(range(0, 2000000, 2))
    assert binary_search_left(big, 1234567) == 617284
