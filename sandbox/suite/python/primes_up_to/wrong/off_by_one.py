def primes_up_to(n):
    if n < 2:
        return []
    sieve = bytearray([1]) * n
    sieve[0] = sieve[1] = 0
    p = 2
    while p * p < n:
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(range(p * p, n, p)))
        p += 1
    return [i for i in range(n) if sieve[i]]
