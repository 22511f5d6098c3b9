import random

from solution import int_to_roman

_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def _value(s):
    total = 0
    for i, c in enumerate(s):
        v = _VALUES[c]
        total += -v if i + 1 < len(s) and _VALUES[s[i + 1]] > v else v
    return total


def _expected(n):
    ones = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]
    tens = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
    hundreds = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]
    return "M" * (n // 1000) + hundreds[n // 100 % 10] + tens[n // 10 % 10] + ones[n % 10]


def test_fixed_values():
    assert int_to_roman(40) == "XL"
    assert int_to_roman(90) == "XC"
    assert int_to_roman(400) == "CD"
    assert int_to_roman(900) == "CM"
    assert int_to_roman(2024) == "MMXXIV"
    assert int_to_roman(3888) == "MMMDCCCLXXXVIII"
    assert int_to_roman(49) == "XLIX"


def test_round_trip_everywhere():
    for n in list(range(1, 120)) + random.sample(range(120, 4000), 200):
        got = int_to_roman(n)
        assert got == _expected(n) and _value(got) == n
