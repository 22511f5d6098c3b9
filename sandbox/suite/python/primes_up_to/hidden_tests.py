import random

from solution import primes_up_to


def _is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def test_negative_and_small():
    assert primes_up_to(-5) == []
    assert primes_up_to(3) == [2, 3]
    assert primes_up_to(4) == [2, 3]
    assert primes_up_to(25) == [2, 3, 5, 7, 11, 13, 17, 19, 23]
    assert primes_up_to(49) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]


def test_random_bounds():
    for n in random.sample(range(0, 600), 40):
        assert primes_up_to(n) == [p for p in range(n + 1) if _is_prime(p)]


def test_large_other_bound():
    primes = primes_up_to(150000)
    assert len(primes) == 13848
    assert primes[-3:] == [149969, 149971, 149993]
