import random

from solution import spiral_order


def _expected(m):
    m = [row[:] for row in m]
    out = []
    while m:
        out.extend(m.pop(0))
        m = [list(col) for col in zip(*m)][::-1]
    return out


def test_fixed_shapes():
    assert spiral_order([[5]]) == [5]
    assert spiral_order([[1, 2], [3, 4]]) == [1, 2, 4, 3]
    assert spiral_order([[1, 2, 3], [4, 5, 6]]) == [1, 2, 3, 6, 5, 4]
    assert spiral_order([[1], [2]]) == [1, 2]
    assert spiral_order([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]) == [
        1, 2, 3, 4, 8, 12, 16, 15, 14, 13, 9, 5, 6, 7, 11, 10]


def test_random_shapes():
    for _ in range(100):
        rows, cols = random.randint(1, 7), random.randint(1, 7)
        m = [[random.randint(0, 99) for _ in range(cols)] for _ in range(rows)]
        assert spiral_order(m) == _expected(m)


def test_empty_again():
    # The same empty input as the visible tests, after other calls: state kept between calls shows.
    assert spiral_order([[1, 2], [3, 4]]) == [1, 2, 4, 3]
    assert spiral_order([]) == []
