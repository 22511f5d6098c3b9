from solution import run_length_encode


def test_examples():
    assert run_length_encode("aaabcc") == "a3b1c2"
    assert run_length_encode("abc") == "a1b1c1"


def test_long_runs():
    assert run_length_encode("x" * 12) == "x12"
    assert run_length_encode("ab" + "b" * 99) == "a1b100"


def test_empty_and_single():
    assert run_length_encode("") == ""
    assert run_length_encode("z") == "z1"
