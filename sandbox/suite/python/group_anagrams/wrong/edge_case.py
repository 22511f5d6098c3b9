def group_anagrams(words):
    groups = {}
    for w in set(words):
        groups.setdefault("".join(sorted(w)), []).append(w)
    return sorted(sorted(g) for g in groups.values())
