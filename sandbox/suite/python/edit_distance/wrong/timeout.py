def edit_distance(a, b):
    if not a:
        return len(b)
    if not b:
        return len(a)
    return min(edit_distance(a[1:], b) + 1,
               edit_distance(a, b[1:]) + 1,
               edit_distance(a[1:], b[1:]) + (a[0] != b[0]))
