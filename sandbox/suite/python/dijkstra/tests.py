from solution import dijkstra

INF = float("inf")


def test_weighted_beats_fewer_hops():
    edges = [(0, 1, 10), (0, 2, 1), (2, 1, 2), (1, 3, 1)]
    assert dijkstra(4, edges, 0) == [0, 3, 1, 4]


def test_directed_and_unreachable():
    edges = [(0, 1, 5), (2, 0, 1)]
    assert dijkstra(3, edges, 0) == [0, 5, INF]
    assert dijkstra(3, edges, 2) == [1, 6, 0]


def test_parallel_and_zero_weight():
    edges = [(0, 1, 7), (0, 1, 2), (1, 2, 0)]
    assert dijkstra(3, edges, 0) == [0, 2, 2]
