TABLE = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
         (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def int_to_roman(n):
    out = []
    while n >= 0:
        for value, symbol in TABLE:
            if n >= value:
                out.append(symbol)
                n -= value
                break
    return "".join(out)
