def flatten(nested):
    out = []
    stack = list(nested)
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        else:
            out.append(item)
    return out
