"""functions-js's `hijack`: asks to switch protocols (101), which an HTTP function cannot do; the
client must see an error, not a hung connection."""


def handler(request, caller):
    return None, 101
