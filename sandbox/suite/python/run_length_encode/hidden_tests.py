import random

from solution import run_length_encode


def _expected(s):
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(s[i] + str(j - i))
        i = j
    return "".join(out)


def test_fixed_strings():
    assert run_length_encode("aabbaa") == "a2b2a2"
    assert run_length_encode("  x") == " 2x1"
    assert run_length_encode("1112") == "1321"
    assert run_length_encode("q" * 10) == "q10"
    assert run_length_encode("m" * 1000 + "n") == "m1000n1"


def test_random_strings():
    for _ in range(200):
        s = "".join(random.choice("ab") * random.randint(1, 12) for _ in range(random.randint(0, 6)))
        assert run_length_encode(s) == _expected(s)
