"""sys.exit() in the middle of a call."""

import sys


def handler(request, caller):
    sys.exit(3)
