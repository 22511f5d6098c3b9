import random

from solution import top_k_frequent


def _expected(words, k):
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:k]


def test_fixed_lists():
    assert top_k_frequent(["a"], 1) == ["a"]
    assert top_k_frequent(["z", "y", "x"], 3) == ["x", "y", "z"]
    assert top_k_frequent(["b", "b", "a", "c", "c", "c"], 1) == ["c"]
    assert top_k_frequent(["b", "b", "a", "c", "c", "c"], 2) == ["c", "b"]
    assert top_k_frequent(["apple", "app", "app", "apple"], 2) == ["app", "apple"]


def test_random_lists():
    for _ in range(200):
        words = [random.choice(["ab", "b", "ba", "c", "a", "bb"]) for _ in range(random.randint(0, 12))]
        k = random.randint(1, 7)
        assert top_k_frequent(words, k) == _expected(words, k)
