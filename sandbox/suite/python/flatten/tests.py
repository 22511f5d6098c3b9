from solution import flatten


def test_example():
    assert flatten([1, [2, [3, "ab"]], [], (4, 5)]) == [1, 2, 3, "ab", (4, 5)]


def test_deep():
    deep = [0]
    for i in range(1, 50):
        deep = [deep, i]
    assert flatten(deep) == list(range(50))


def test_strings_are_atoms():
    assert flatten(["abc", ["d"]]) == ["abc", "d"]


def test_empty():
    assert flatten([]) == []
    assert flatten([[], [[]]]) == []
