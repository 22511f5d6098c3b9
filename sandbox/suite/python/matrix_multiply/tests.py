from leap_testing import raises
from solution import matrix_multiply


def test_square():
    assert matrix_multiply([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]


def test_rectangular():
    assert matrix_multiply([[1, 2, 3]], [[4], [5], [6]]) == [[32]]
    assert matrix_multiply([[1], [2]], [[3, 4]]) == [[3, 4], [6, 8]]


def test_mismatch_raises():
    with raises("ValueError"):
        matrix_multiply([[1, 2]], [[1, 2]])
