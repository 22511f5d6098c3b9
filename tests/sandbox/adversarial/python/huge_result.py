# task: python/primes_up_to
# expect: wrong_answer | runtime
# class: returns a list of 30 million items (hardening: must not exhaust the judge)
# feedback: more than
def primes_up_to(n):
    return [2] * 30_000_000
