import random

from leap_testing import raises
from solution import matrix_multiply


def _expected(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def test_identity_and_negative():
    assert matrix_multiply([[1, 0], [0, 1]], [[-3, 4], [5, -6]]) == [[-3, 4], [5, -6]]
    assert matrix_multiply([[2]], [[-7]]) == [[-14]]
    assert matrix_multiply([[1, 2, 3], [4, 5, 6]], [[7, 8], [9, 10], [11, 12]]) == [[58, 64], [139, 154]]


def test_other_mismatches():
    with raises("ValueError"):
        matrix_multiply([[1, 2, 3]], [[1], [2]])
    with raises("ValueError"):
        matrix_multiply([[1], [2]], [[1, 2], [3, 4]])


def test_random_shapes():
    for _ in range(60):
        n, m, p = random.randint(1, 5), random.randint(1, 5), random.randint(1, 5)
        a = [[random.randint(-9, 9) for _ in range(m)] for _ in range(n)]
        b = [[random.randint(-9, 9) for _ in range(p)] for _ in range(m)]
        a_copy = [row[:] for row in a]
        assert matrix_multiply(a, b) == _expected(a, b)
        assert a == a_copy
