import random

from solution import group_anagrams


def _expected(words):
    groups = {}
    for w in words:
        groups.setdefault("".join(sorted(w)), []).append(w)
    return sorted(sorted(g) for g in groups.values())


def test_single_letters_and_lengths():
    assert group_anagrams(["a", "b", "a"]) == [["a", "a"], ["b"]]
    assert group_anagrams(["ab", "abc", "ba", "cab"]) == [["ab", "ba"], ["abc", "cab"]]
    assert group_anagrams(["zz", "z", ""]) == [[""], ["z"], ["zz"]]


def test_groups_sorted_by_first_word():
    assert group_anagrams(["tops", "opts", "bat", "tab", "spot"]) == [["bat", "tab"], ["opts", "spot", "tops"]]


def test_random_words():
    for _ in range(100):
        words = ["".join(random.choice("abc") for _ in range(random.randint(0, 4)))
                 for _ in range(random.randint(0, 10))]
        assert group_anagrams(words) == _expected(words)
