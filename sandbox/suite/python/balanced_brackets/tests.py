from solution import is_balanced


def test_balanced():
    assert is_balanced("")
    assert is_balanced("a(b[c]{d}e)f")
    assert is_balanced("{[()()]}")


def test_wrong_kind():
    assert not is_balanced("(]")
    assert not is_balanced("([)]")


def test_unclosed_and_unopened():
    assert not is_balanced("((")
    assert not is_balanced(")(")
    assert not is_balanced("}")
