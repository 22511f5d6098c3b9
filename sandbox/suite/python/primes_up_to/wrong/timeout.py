def primes_up_to(n):
    primes = []
    for k in range(2, n + 1):
        if all(k % d for d in range(2, k)):
            primes.append(k)
    return primes
