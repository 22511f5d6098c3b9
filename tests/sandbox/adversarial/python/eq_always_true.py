# task: python/binary_search_left
# expect: runtime | wrong_answer
# class: returns an object whose == is always true (and != false, hashable, truthy)
# feedback: is not plain data
class _Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0

    def __bool__(self):
        return True

    def __repr__(self):
        return "0"


def binary_search_left(nums, target):
    return _Anything()
