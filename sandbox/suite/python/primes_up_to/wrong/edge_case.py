def primes_up_to(n):
    sieve = bytearray([1]) * (n + 1)
    p = 2
    while p * p <= n:
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(range(p * p, n + 1, p)))
        p += 1
    return [i for i in range(1, n + 1) if sieve[i]]
