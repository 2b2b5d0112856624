"""Never answers."""

import time


def handler(request, caller):
    time.sleep(3600)
