def matrix_multiply(a, b):
    m, p = len(b), len(b[0])
    return [[sum(row[k] * b[k][j] for k in range(m)) for j in range(p)] for row in a]
