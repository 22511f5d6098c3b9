from solution import int_to_roman


def test_examples():
    assert int_to_roman(3) == "III"
    assert int_to_roman(58) == "LVIII"
    assert int_to_roman(1994) == "MCMXCIV"


def test_subtractive_forms():
    assert int_to_roman(4) == "IV"
    assert int_to_roman(9) == "IX"
    assert int_to_roman(444) == "CDXLIV"


def test_bounds():
    assert int_to_roman(1) == "I"
    assert int_to_roman(3999) == "MMMCMXCIX"
