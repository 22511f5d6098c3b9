def matrix_multiply(a, b):
    if not a or not b:
        raise ValueError("empty matrix")
    m = len(a[0])
    if m != len(b):
        raise ValueError("inner dimensions differ: %d vs %d" % (m, len(b)))
    p = len(b[0])
    return [[sum(row[k] * b[k][j] for k in range(m)) for j in range(p)] for row in a]
