def rotate_matrix(m):
    if not m:
        return []
    m.reverse()
    return [list(col) for col in zip(*m)]
