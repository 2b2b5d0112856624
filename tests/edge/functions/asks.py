"""Calls minibase's table API as its caller, then as the service: what each may read."""

from runner.api import service


def handler(request, caller):
    mine = caller.client().get("/rest/v1/notes?select=body")
    every = service().get("/rest/v1/notes?select=body")
    return {"caller": [mine.status, mine.json()], "service": [every.status, every.json()]}
