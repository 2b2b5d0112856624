"""Raises, with a secret in the message: the client must see neither."""

import os


def handler(request, caller):
    raise RuntimeError(f"boom {os.environ['SUPABASE_SERVICE_ROLE_KEY']} at {__file__}")
