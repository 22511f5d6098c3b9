import random

from solution import parse_csv_line


def _encode(fields):
    out = []
    for f in fields:
        if "," in f or '"' in f or (f and random.random() < 0.3):
            out.append('"' + f.replace('"', '""') + '"')
        else:
            out.append(f)
    return ",".join(out)


def test_fixed_lines():
    assert parse_csv_line("single") == ["single"]
    assert parse_csv_line(",,") == ["", "", ""]
    assert parse_csv_line('"",x') == ["", "x"]
    assert parse_csv_line('a,"b,c,d",e') == ["a", "b,c,d", "e"]
    assert parse_csv_line('"""quoted"""') == ['"quoted"']
    assert parse_csv_line('" spaced ",') == [" spaced ", ""]


def test_random_round_trip():
    for _ in range(200):
        fields = ["".join(random.choice('ab ,"') for _ in range(random.randint(0, 5)))
                  for _ in range(random.randint(1, 5))]
        assert parse_csv_line(_encode(fields)) == fields
