import random

from solution import roman_to_int


def _numeral(n):
    ones = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]
    tens = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
    hundreds = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]
    return "M" * (n // 1000) + hundreds[n // 100 % 10] + tens[n // 10 % 10] + ones[n % 10]


def test_fixed_numerals():
    assert roman_to_int("XL") == 40
    assert roman_to_int("XC") == 90
    assert roman_to_int("CD") == 400
    assert roman_to_int("CM") == 900
    assert roman_to_int("MMXXIV") == 2024
    assert roman_to_int("MMMDCCCLXXXVIII") == 3888
    assert roman_to_int("XLIX") == 49


def test_every_form():
    for n in list(range(1, 120)) + random.sample(range(120, 4000), 200):
        assert roman_to_int(_numeral(n)) == n
