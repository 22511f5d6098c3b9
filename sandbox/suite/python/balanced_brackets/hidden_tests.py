import random

from solution import is_balanced


def _expected(s):
    closing = {")": "(", "]": "[", "}": "{"}
    stack = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif c in closing:
            if not stack or stack.pop() != closing[c]:
                return False
    return not stack


def test_other_characters_and_kinds():
    assert is_balanced("no brackets at all")
    assert is_balanced("[{}](){[]}")
    assert is_balanced("<(>)")
    assert not is_balanced("[(])")
    assert not is_balanced("x{y")
    assert not is_balanced("]")
    assert not is_balanced("(()")
    assert not is_balanced("{[}]")
    assert not is_balanced("())(")


def test_deep_nesting():
    assert is_balanced("([{" * 300 + "}])" * 300)
    assert not is_balanced("([{" * 300 + "}])" * 299 + "})")


def test_random_strings():
    for _ in range(300):
        s = "".join(random.choice("()[]{}ab") for _ in range(random.randint(0, 14)))
        assert is_balanced(s) == _expected(s)
