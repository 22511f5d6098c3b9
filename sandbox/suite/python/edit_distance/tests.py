from solution import edit_distance


def test_examples():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("flaw", "lawn") == 2
    assert edit_distance("intention", "execution") == 5


def test_empty():
    assert edit_distance("", "") == 0
    assert edit_distance("abc", "") == 3
    assert edit_distance("", "abcd") == 4


def test_long_strings_are_fast():
    a = "ab" * 150
    b = "ba" * 150
    assert edit_distance(a, b) == 2
    assert edit_distance("x" * 300, "y" * 300) == 300
