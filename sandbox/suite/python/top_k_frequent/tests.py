from solution import top_k_frequent


def test_example():
    words = ["i", "love", "leetcode", "i", "love", "coding"]
    assert top_k_frequent(words, 2) == ["i", "love"]


def test_ties_alphabetical():
    words = ["the", "day", "is", "sunny", "the", "the", "the", "sunny", "is", "is"]
    assert top_k_frequent(words, 4) == ["the", "is", "sunny", "day"]
    assert top_k_frequent(["b", "a", "c", "a", "b", "c"], 2) == ["a", "b"]


def test_k_larger_than_distinct():
    assert top_k_frequent(["x", "y", "x"], 5) == ["x", "y"]
    assert top_k_frequent([], 3) == []
