"""Who a socket and each of its channels are: the API key of the socket, and the access token a join
or an `access_token` event brings, verified by the auth service as every other API verifies them.
Run in the app's context (sessions.Realtime.call)."""

from auth import identity
from errors import APIError

MISSING_KEY = "No API key found in request"
INVALID_KEY = "Invalid API key"
CHUNK = 500  # tokens verified in one read of their sessions: SQLite binds at most 32,766 values


def key_role(key):
    """anon or service_role for the socket's API key; None when it is not a valid one."""
    return identity.api_key_role(key) if key else None


def caller(token, role):
    """(Identity, expires) of a channel: the user of `token`, or the socket key's `role` when no token
    (or an API key) is given; `expires` is when a user's token stops being valid (None for a key).
    APIError when the token is bad, expired, logged out or its user banned."""
    if not token or token.startswith("sb_"):
        return identity.Identity(role), None
    key = identity.api_key_role(token)
    if key is not None:
        return identity.Identity(key), None
    who = identity.identify(token)  # by the key its kid names: HS256 or JWT_SIGNING_KEYS
    return who, who.expires_at


def verify_all(tokens):
    """{token: its Identity now, or the words of why it no longer holds} for the access tokens of
    channels, each verified again as a request's would be, with one read per CHUNK of them."""
    wanted = [token for token in tokens if not token.startswith("sb_")]
    judged = {}
    for start in range(0, len(wanted), CHUNK):
        judged.update(identity.identify_all(wanted[start : start + CHUNK]))
    return {token: found.message if isinstance(found, APIError) else found for token, found in judged.items()}


def reason(error):
    """Supabase's words for a token refused: `InvalidJWTToken: …`."""
    if isinstance(error, APIError):
        return f"InvalidJWTToken: {error.message}"
    return "InvalidJWTToken: The token provided is not a valid JWT"
