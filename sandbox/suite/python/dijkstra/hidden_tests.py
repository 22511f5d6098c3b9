import random

from solution import dijkstra

INF = float("inf")


def _expected(n, edges, src):
    # Bellman-Ford: a different algorithm than the one asked for.
    dist = [INF] * n
    dist[src] = 0
    for _ in range(n):
        for u, v, w in edges:
            if dist[u] + w < dist[v]:
                dist[v] = dist[u] + w
    return dist


def test_single_node_and_self_loop():
    assert dijkstra(1, [], 0) == [0]
    assert dijkstra(2, [(0, 0, 3), (1, 0, 1)], 1) == [1, 0]
    assert dijkstra(2, [(1, 0, 1)], 0) == [0, INF]


def test_later_relaxation_wins():
    edges = [(0, 1, 1), (0, 2, 5), (1, 2, 1), (2, 3, 1), (1, 3, 10), (3, 4, 0)]
    assert dijkstra(5, edges, 0) == [0, 1, 2, 3, 3]


def test_random_graphs():
    for _ in range(60):
        n = random.randint(1, 9)
        edges = [(random.randrange(n), random.randrange(n), random.randint(0, 9))
                 for _ in range(random.randint(0, 3 * n))]
        src = random.randrange(n)
        assert dijkstra(n, edges, src) == _expected(n, edges, src)
