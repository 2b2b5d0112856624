"""Looks for what it should not see: other functions' modules in its process, the service's
JWT secret in its environment."""

import os
import sys


def handler(request, caller):
    return {
        "other_functions": sorted(name for name in sys.modules if name.startswith("minibase_function_")),
        "jwt_secret": os.environ.get("JWT_SECRET"),
        "greeting": os.environ.get("GREETING"),
    }
