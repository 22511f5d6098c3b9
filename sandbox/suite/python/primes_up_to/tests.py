from solution import primes_up_to


def test_small():
    assert primes_up_to(10) == [2, 3, 5, 7]
    assert primes_up_to(13) == [2, 3, 5, 7, 11, 13]


def test_edges():
    assert primes_up_to(1) == []
    assert primes_up_to(0) == []
    assert primes_up_to(2) == [2]


def test_large():
    primes = primes_up_to(200000)
    assert len(primes) == 17984
    assert primes[-1] == 199999
