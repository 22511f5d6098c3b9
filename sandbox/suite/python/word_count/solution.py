import re


def word_count(text):
    counts = {}
    for word in re.findall(r"[A-Za-z]+", text):
        key = word.lower()
        counts[key] = counts.get(key, 0) + 1
    return counts
