import random

from solution import edit_distance


def _expected(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_small_cases():
    assert edit_distance("a", "a") == 0
    assert edit_distance("a", "b") == 1
    assert edit_distance("ab", "ba") == 2
    assert edit_distance("abc", "yabd") == 2
    assert edit_distance("sunday", "saturday") == 3
    assert edit_distance("", "z") == 1


def test_random_pairs():
    for _ in range(80):
        a = "".join(random.choice("abc") for _ in range(random.randint(0, 9)))
        b = "".join(random.choice("abc") for _ in range(random.randint(0, 9)))
        assert edit_distance(a, b) == _expected(a, b)


def test_long_random_is_fast():
    a = "".join(random.choice("acgt") for _ in range(350))
    b = "".join(random.choice("acgt") for _ in range(320))
    assert edit_distance(a, b) == _expected(a, b)
