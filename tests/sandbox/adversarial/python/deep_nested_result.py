# task: python/flatten
# expect: wrong_answer | runtime
# class: returns a structure nested 100000 levels deep (hardening: must not break the judge)
# feedback: nested more than
def flatten(items):
    deep = []
    for _ in range(100000):
        deep = [deep]
    return deep
