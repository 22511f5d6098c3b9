def rotate_matrix(m):
    if not m:
        return []
    rows, cols = len(m), len(m[0])
    return [[m[r][cols - 1 - c] for r in range(rows)] for c in range(cols)]
