"""functions-js's `slow`: answers after three seconds."""

import time


def handler(request, caller):
    time.sleep(3)
    return "Slow Response"
