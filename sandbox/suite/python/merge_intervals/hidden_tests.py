import random

from solution import merge_intervals


def _expected(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def test_points_and_gaps():
    assert merge_intervals([[3, 3], [1, 1], [2, 2]]) == [[1, 1], [2, 2], [3, 3]]
    assert merge_intervals([[5, 5], [5, 9]]) == [[5, 9]]
    assert merge_intervals([[1, 4], [0, 0]]) == [[0, 0], [1, 4]]
    assert merge_intervals([[-10, -5], [-6, 0], [1, 2]]) == [[-10, 0], [1, 2]]
    assert merge_intervals([[7, 8]]) == [[7, 8]]


def test_random_sets_unchanged():
    for _ in range(150):
        data = []
        for _ in range(random.randint(0, 8)):
            s = random.randint(-10, 10)
            data.append([s, s + random.randint(0, 5)])
        copy = [pair[:] for pair in data]
        assert merge_intervals(data) == _expected(copy)
        assert data == copy
