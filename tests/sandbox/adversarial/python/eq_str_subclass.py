# task: python/int_to_roman
# expect: wrong_answer | runtime
# class: returns a str subclass whose == is always true
class _Str(str):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = str.__hash__


def int_to_roman(n):
    return _Str("?")
