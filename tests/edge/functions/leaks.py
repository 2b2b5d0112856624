"""Leaves a thread running and files open after it answers; says which process answered."""

import os
import threading
import time

kept = []


def handler(request, caller):
    if request.query.get("what") == "thread":
        threading.Thread(target=time.sleep, args=(3600,)).start()
    else:
        kept.append(open(os.devnull))
    return {"pid": os.getpid()}
