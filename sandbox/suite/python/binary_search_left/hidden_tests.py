import random

from solution import binary_search_left


def test_all_equal_and_ends():
    assert binary_search_left([4, 4, 4, 4], 4) == 0
    assert binary_search_left([4, 4, 4, 4], 5) == 4
    assert binary_search_left([4, 4, 4, 4], 3) == 0
    assert binary_search_left([-5, -2, 0, 0, 8], 0) == 2
    assert binary_search_left([10], 10) == 0
    assert binary_search_left([10], 11) == 1


def test_random_sorted_lists():
    for _ in range(200):
        arr = sorted(random.randint(-20, 20) for _ in range(random.randint(0, 30)))
        x = random.randint(-22, 22)
        assert binary_search_left(arr, x) == sum(1 for v in arr if v < x)


def test_large():
    big = list(range(0, 450000, 3))
    for x, want in ((-1, 0), (4, 2), (449997, 149999), (449998, 150000)):
        assert binary_search_left(big, x) == want
