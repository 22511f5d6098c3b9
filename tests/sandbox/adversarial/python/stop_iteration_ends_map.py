# task: python/tasks/is_prime_map
# expect: runtime | wrong_answer
# class: raises StopIteration from the function, which, re-raised in the judge as the builtin, silently ends the tests' all(map(...)) and any(map(...)) so that nothing is ever computed
# feedback: StopIteration


def is_prime(n):
    raise StopIteration
