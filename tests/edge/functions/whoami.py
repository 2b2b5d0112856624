"""The caller as the function sees it, and the project's settings it was given (not their values)."""

import os


def handler(request, caller):
    return {
        "role": caller.role,
        "user_id": caller.user_id,
        "sub": caller.claims.get("sub"),
        "has_url": bool(os.environ.get("SUPABASE_URL")),
        "has_service_key": bool(os.environ.get("SUPABASE_SERVICE_ROLE_KEY")),
    }
