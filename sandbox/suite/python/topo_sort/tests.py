from solution import topo_sort


def test_chain_and_smallest_first():
    assert topo_sort(3, [(2, 1), (1, 0)]) == [2, 1, 0]
    assert topo_sort(4, [(3, 0)]) == [1, 2, 3, 0]


def test_smallest_available_after_release():
    assert topo_sort(5, [(0, 4), (4, 1), (2, 3)]) == [0, 2, 3, 4, 1]
    assert topo_sort(4, [(0, 3), (1, 2)]) == [0, 1, 2, 3]


def test_cycle():
    assert topo_sort(3, [(0, 1), (1, 2), (2, 0)]) is None
    assert topo_sort(2, [(1, 1)]) is None


def test_no_edges():
    assert topo_sort(3, []) == [0, 1, 2]
    assert topo_sort(0, []) == []
