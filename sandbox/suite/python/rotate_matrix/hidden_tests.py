import random

from solution import rotate_matrix


def _expected(m):
    rows = len(m)
    cols = len(m[0]) if m else 0
    return [[m[rows - 1 - r][c] for r in range(rows)] for c in range(cols)]


def test_single_and_wide():
    assert rotate_matrix([[7]]) == [[7]]
    assert rotate_matrix([[1, 2, 3, 4]]) == [[1], [2], [3], [4]]
    assert rotate_matrix([["a", "b"], ["c", "d"], ["e", "f"]]) == [["e", "c", "a"], ["f", "d", "b"]]


def test_four_turns_give_the_original():
    m = [[1, 2, 3], [4, 5, 6]]
    r = m
    for _ in range(4):
        r = rotate_matrix(r)
    assert r == m


def test_random_shapes_unchanged():
    for _ in range(80):
        rows, cols = random.randint(1, 6), random.randint(1, 6)
        m = [[random.randint(0, 99) for _ in range(cols)] for _ in range(rows)]
        copy = [row[:] for row in m]
        assert rotate_matrix(m) == _expected(copy)
        assert m == copy
