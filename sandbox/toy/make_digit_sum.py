#!/usr/bin/env python3
"""Writes digit_sum.jsonl: the toy task family of the learning quickstart (configs/learn_digits.yaml).

One task per target sum N = 1..9: "Write digits whose sum is N." A single digit can answer each, so
a tiny model trained from scratch finds passes by chance often enough to learn from them (about 2%
of its first random answers pass); two-digit targets are much rarer by chance and are left out of
the quickstart's family. Each task carries a correct answer and realistic wrong ones, used by the
scripted policy server and the tests. Deterministic; run it again to
regenerate the file after changing it:  python3 sandbox/toy/make_digit_sum.py
"""
import json
import os

def solution(n):
    digits = []
    while n > 0:
        digits.append(min(9, n))
        n -= digits[-1]
    return "".join(str(d) for d in digits)

def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digit_sum.jsonl")
    with open(out, "w") as f:
        for n in range(1, 10):
            good = solution(n)
            wrong = [
                {"label": "off_by_one", "code": solution(n + 1)},
                {"label": "no_digits", "code": "The answer is the sum."},
                {"label": "one_short", "code": solution(n - 1) or "0"},
            ]
            task = {
                "id": "digits/sum_%02d" % n,
                "kind": "digits",
                "target": n,
                "difficulty": 1,
                "category": "digit_sum",
                "prompt": "Write digits whose sum is %d." % n,
                "solution": good,
                "wrong": wrong,
            }
            f.write(json.dumps(task) + "\n")

if __name__ == "__main__":
    main()
