"""functions-js's `hello`: a plain text answer."""


def handler(request, caller):
    return "Hello World"
