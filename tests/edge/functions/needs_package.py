"""Imports a package that is not installed: the module cannot boot."""

import minibase_no_such_package  # noqa: F401


def handler(request, caller):
    return "never"
