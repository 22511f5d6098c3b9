from solution import is_prime


def test_more_primes():
    assert all(map(is_prime, [7919, 104729, 2147483647]))


def test_more_composites():
    assert not any(map(is_prime, [-2, 25, 7917, 104730, 2147483649]))
