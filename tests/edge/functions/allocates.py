"""Allocates without end (?at_once=1: one allocation past any limit)."""


def handler(request, caller):
    if request.query.get("at_once"):
        return bytes(bytearray(10**11))
    kept = []
    while True:
        kept.append(bytearray(1024 * 1024))
