def rotate_matrix(m):
    if not m:
        return []
    rows, cols = len(m), len(m[0])
    return [[m[rows - 1 - r][c] for r in range(rows)] for c in range(cols)]
