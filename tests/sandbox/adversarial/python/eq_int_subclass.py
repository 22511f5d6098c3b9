# task: python/binary_search_left
# expect: wrong_answer | runtime
# class: returns an int subclass whose == is always true (it passes isinstance(x, int) checks)
class _Int(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


def binary_search_left(nums, target):
    return _Int(-1)
