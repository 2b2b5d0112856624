"""Signed tokens: API keys, access tokens and refresh tokens (HS256 only), and the clock they use."""

import time
from datetime import UTC, datetime

import jwt

ISSUER = "minibase"
ALGORITHM = "HS256"
API_KEY_ROLES = ("anon", "service_role")
API_KEY_LIFETIME = 10 * 365 * 24 * 3600
REFRESH_TYPE = "refresh"


class TokenError(Exception):
    """A token that is malformed, wrongly signed, of the wrong kind, or expired."""

    def __init__(self, message, expired=False):
        super().__init__(message)
        self.expired = expired


def now():
    """Seconds since the epoch; the one clock, so tests can move it."""
    return int(time.time())


def utcnow():
    """The clock as a naive UTC datetime, for database columns."""
    return datetime.fromtimestamp(now(), UTC).replace(tzinfo=None)


def _decode(token, secret, options, **kwargs):
    """Verify signature, algorithm, issuer and required claims; expiry against our clock."""
    options = {**options, "verify_exp": False, "verify_iat": False, "verify_nbf": False}
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], issuer=ISSUER, options=options, **kwargs)
    except jwt.PyJWTError as exc:
        raise TokenError(f"invalid token: {exc}") from None
    expires = claims.get("exp")
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        raise TokenError("invalid token: exp is not a number")
    if expires <= now():
        raise TokenError("token has expired", expired=True)
    return claims


def api_key(role, secret):
    """The API key for `role`; stable within a year, so printing it again gives the same key."""
    year_start = int(datetime(datetime.fromtimestamp(now(), UTC).year, 1, 1, tzinfo=UTC).timestamp())
    claims = {"role": role, "iss": ISSUER, "iat": year_start, "exp": year_start + API_KEY_LIFETIME}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def api_key_role(token, secret):
    """The role of a valid API key, or None when `token` is not one."""
    try:
        claims = _decode(token, secret, {"require": ["iat", "exp", "role"]})
    except TokenError:
        return None
    role = claims.get("role")
    if role not in API_KEY_ROLES or "aud" in claims or "sub" in claims:
        return None
    return role


def access_token(claims, secret, lifetime):
    issued = now()
    payload = {
        "iss": ISSUER,
        "aud": "authenticated",
        "role": "authenticated",
        "iat": issued,
        "exp": issued + lifetime,
        **claims,
    }
    return jwt.encode(payload, secret, algorithm=ALGORITHM), payload["exp"]


def decode_access_token(token, secret):
    """The claims of a valid access token. Refresh tokens and API keys fail: they have no audience."""
    claims = _decode(
        token, secret, {"require": ["iat", "exp", "sub", "session_id", "aud"]}, audience="authenticated"
    )
    if claims.get("role") != "authenticated" or claims.get("typ") == REFRESH_TYPE:
        raise TokenError("not an access token")
    if not isinstance(claims["session_id"], str) or not claims["sub"].isdigit():
        raise TokenError("malformed claims")
    return claims


def refresh_token(session_id, user_id, jti, issued, secret, lifetime):
    """A refresh token; the same arguments give the same string, so it can be handed out again."""
    payload = {
        "iss": ISSUER,
        "typ": REFRESH_TYPE,
        "sub": str(user_id),
        "sid": session_id,
        "jti": jti,
        "iat": issued,
        "exp": issued + lifetime,
    }
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def decode_refresh_token(token, secret):
    claims = _decode(token, secret, {"require": ["iat", "exp", "jti", "sid"]})
    if claims.get("typ") != REFRESH_TYPE or "aud" in claims or not isinstance(claims["jti"], str):
        raise TokenError("not a refresh token")
    return claims
