import random

from solution import word_count


def _expected(text):
    counts = {}
    word = ""
    for ch in text + " ":
        if ("a" <= ch <= "z") or ("A" <= ch <= "Z"):
            word += ch.lower()
        elif word:
            counts[word] = counts.get(word, 0) + 1
            word = ""
    return counts


def test_fixed_texts():
    assert word_count("A") == {"a": 1}
    assert word_count("x_y") == {"x": 1, "y": 1}
    assert word_count("Caf\u00e9 cafe") == {"caf": 1, "cafe": 1}
    assert word_count("tab\tnew\nline") == {"tab": 1, "new": 1, "line": 1}
    assert word_count("MiXeD mixed MIXED") == {"mixed": 3}


def test_random_texts():
    for _ in range(150):
        text = "".join(random.choice("abAB 1.-_\n\u00e9") for _ in range(random.randint(0, 30)))
        assert word_count(text) == _expected(text)
