# task: python/primes_up_to
# expect: runtime
# class: solves the task, and leaves 30 sparse files of 63 MiB at import (os.truncate: no scratch page used, 1.8 GiB once copied back to the host)
# feedback: working folder
import os

for i in range(30):
    with open("table%02d.bin" % i, "wb") as f:
        os.truncate(f.fileno(), 63 << 20)


def primes_up_to(n):
    if n < 2:
        return []
    sieve = bytearray([1]) * (n + 1)
    sieve[0] = sieve[1] = 0
    p = 2
    while p * p <= n:
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(range(p * p, n + 1, p)))
        p += 1
    return [i for i in range(n + 1) if sieve[i]]
