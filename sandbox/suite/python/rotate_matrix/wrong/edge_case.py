def rotate_matrix(m):
    n = len(m)
    return [[m[n - 1 - r][c] for r in range(n)] for c in range(n)]
