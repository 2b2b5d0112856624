"""Spins the CPU and never answers."""


def handler(request, caller):
    while True:
        pass
