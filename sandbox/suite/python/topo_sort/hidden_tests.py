import random

from solution import topo_sort


def _expected(n, edges):
    # Repeatedly the smallest node whose predecessors are all placed: quadratic, but plain.
    placed = []
    left = set(range(n))
    while left:
        ready = [v for v in sorted(left) if all(u not in left for u, w in edges if w == v)]
        if not ready:
            return None
        placed.append(ready[0])
        left.remove(ready[0])
    return placed


def test_fixed_graphs():
    assert topo_sort(1, []) == [0]
    assert topo_sort(3, [(2, 0), (2, 1)]) == [2, 0, 1]
    assert topo_sort(4, [(1, 0), (1, 0), (3, 2)]) == [1, 0, 3, 2]
    assert topo_sort(4, [(0, 1), (1, 2), (2, 1), (3, 0)]) is None
    assert topo_sort(5, [(4, 3), (3, 2), (2, 1), (1, 0)]) == [4, 3, 2, 1, 0]


def test_random_graphs():
    for _ in range(150):
        n = random.randint(0, 8)
        edges = [(random.randrange(n), random.randrange(n)) for _ in range(random.randint(0, 2 * n))] if n else []
        if random.random() < 0.6:
            edges = [(u, v) for u, v in edges if u < v] if random.random() < 0.5 else [(u, v) for u, v in edges if u > v]
        assert topo_sort(n, edges) == _expected(n, edges)
