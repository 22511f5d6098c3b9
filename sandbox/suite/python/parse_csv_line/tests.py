from solution import parse_csv_line


def test_plain():
    assert parse_csv_line("a,b,c") == ["a", "b", "c"]
    assert parse_csv_line("1, 2 ,3") == ["1", " 2 ", "3"]


def test_quoted():
    assert parse_csv_line('"a,b",c') == ["a,b", "c"]
    assert parse_csv_line('x,"say ""hi""",y') == ["x", 'say "hi"', "y"]
    assert parse_csv_line('""') == [""]


def test_empty_fields():
    assert parse_csv_line("") == [""]
    assert parse_csv_line("a,,b,") == ["a", "", "b", ""]
    assert parse_csv_line(",") == ["", ""]
