"""Counts its calls in a module global (warm state) and says which process answered."""

import os

calls = 0


def handler(request, caller):
    global calls
    calls += 1
    print(f"call {calls} in {os.getpid()}")
    return {"pid": os.getpid(), "calls": calls}
