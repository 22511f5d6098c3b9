# Tests written the way a person writes them: predicates checked through all(map(...)) and
# any(map(...)). A StopIteration that crossed the channel as itself would end map() early and make
# both lines pass without a single value computed.
from solution import is_prime


def test_primes():
    assert all(map(is_prime, [2, 3, 5, 7, 11, 13, 97]))


def test_not_primes():
    assert not any(map(is_prime, [-7, 0, 1, 4, 9, 91, 100]))
