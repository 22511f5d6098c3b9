import random

from solution import flatten


def _nested(depth):
    out = []
    for _ in range(random.randint(0, 4)):
        r = random.random()
        if r < 0.3 and depth < 5:
            out.append(_nested(depth + 1))
        elif r < 0.45:
            out.append((random.randint(0, 9), "t"))
        elif r < 0.6:
            out.append(random.choice(["", "xy", None, 2.5, {"k": 1}]))
        else:
            out.append(random.randint(-99, 99))
    return out


def _expected(x):
    out = []
    for item in x:
        if type(item) is list:
            out.extend(_expected(item))
        else:
            out.append(item)
    return out


def test_other_items():
    assert flatten([None, [True, [0.5]], [""], {"a": [1]}]) == [None, True, 0.5, "", {"a": [1]}]
    assert flatten([[[["only"]]]]) == ["only"]
    assert flatten([(), [[], ()], [[[]]]]) == [(), ()]


def test_very_deep():
    deep = "end"
    for _ in range(150):
        deep = [deep]
    assert flatten([1, deep, 2]) == [1, "end", 2]


def test_random_nesting():
    for _ in range(100):
        x = _nested(0)
        assert flatten(x) == _expected(x)
