from solution import word_count


def test_basic():
    assert word_count("the cat and the hat") == {"the": 2, "cat": 1, "and": 1, "hat": 1}


def test_case_and_punctuation():
    assert word_count("Hello, hello! HELLO?") == {"hello": 3}
    assert word_count("it's-a re-run") == {"it": 1, "s": 1, "a": 1, "re": 1, "run": 1}


def test_digits_and_empty():
    assert word_count("abc123def 42") == {"abc": 1, "def": 1}
    assert word_count("") == {}
    assert word_count("  ...  ") == {}
