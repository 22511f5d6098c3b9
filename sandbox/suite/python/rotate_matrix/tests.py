from solution import rotate_matrix


def test_square():
    assert rotate_matrix([[1, 2], [3, 4]]) == [[3, 1], [4, 2]]
    assert rotate_matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [[7, 4, 1], [8, 5, 2], [9, 6, 3]]


def test_rectangular():
    assert rotate_matrix([[1, 2, 3], [4, 5, 6]]) == [[4, 1], [5, 2], [6, 3]]
    assert rotate_matrix([[1], [2], [3]]) == [[3, 2, 1]]


def test_empty_and_unchanged():
    assert rotate_matrix([]) == []
    m = [[1, 2], [3, 4]]
    rotate_matrix(m)
    assert m == [[1, 2], [3, 4]]
