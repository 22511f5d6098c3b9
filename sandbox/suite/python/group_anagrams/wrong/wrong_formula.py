def group_anagrams(words):
    groups = {}
    for w in words:
        groups.setdefault(frozenset(w), []).append(w)
    return sorted(sorted(g) for g in groups.values())
