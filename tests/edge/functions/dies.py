"""os._exit(): the worker process ends at once, nothing cleaned up."""

import os


def handler(request, caller):
    os._exit(7)
