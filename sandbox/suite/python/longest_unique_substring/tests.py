from solution import longest_unique_substring


def test_examples():
    assert longest_unique_substring("abcabcbb") == 3
    assert longest_unique_substring("bbbbb") == 1
    assert longest_unique_substring("pwwkew") == 3


def test_window_never_moves_back():
    assert longest_unique_substring("abba") == 2
    assert longest_unique_substring("tmmzuxt") == 5


def test_edges():
    assert longest_unique_substring("") == 0
    assert longest_unique_substring("a") == 1
    assert longest_unique_substring("abcdef") == 6
