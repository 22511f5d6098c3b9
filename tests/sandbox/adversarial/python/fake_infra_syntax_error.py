# task: python/word_count
# expect: compile | runtime
# class: raises a SyntaxError naming tests.py at import, so the task itself looks broken (an infrastructure error)
# feedback: Syntax error in your code
raise SyntaxError("invalid syntax", ("tests.py", 1, 1, "from solution import word_count"))


def word_count(text):
    return {}
