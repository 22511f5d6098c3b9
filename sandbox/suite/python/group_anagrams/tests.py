from solution import group_anagrams


def test_example():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert group_anagrams(words) == [["ate", "eat", "tea"], ["bat"], ["nat", "tan"]]


def test_multiplicity_matters():
    assert group_anagrams(["aab", "abb", "bab"]) == [["aab"], ["abb", "bab"]]


def test_duplicates_and_empty():
    assert group_anagrams(["ab", "ba", "ab"]) == [["ab", "ab", "ba"]]
    assert group_anagrams([""]) == [[""]]
    assert group_anagrams([]) == []
