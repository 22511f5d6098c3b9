import random

from solution import longest_unique_substring


def _expected(s):
    best = 0
    for i in range(len(s)):
        seen = set()
        for c in s[i:]:
            if c in seen:
                break
            seen.add(c)
        best = max(best, len(seen))
    return best


def test_fixed_strings():
    assert longest_unique_substring("dvdf") == 3
    assert longest_unique_substring("aab") == 2
    assert longest_unique_substring("abcdeafghij") == 10
    assert longest_unique_substring("  ") == 1
    assert longest_unique_substring("a b c a") == 3
    assert longest_unique_substring("abcdefghijklmnopqrstuvwxyz" * 3) == 26


def test_random_strings():
    for _ in range(200):
        s = "".join(random.choice("abcde ") for _ in range(random.randint(0, 20)))
        assert longest_unique_substring(s) == _expected(s)
