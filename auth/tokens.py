"""Signed tokens: API keys, access tokens and refresh tokens, and the clock they use. Access tokens
are signed with the keyring's signing key (ES256 or RS256, auth/signing_keys.py) or HS256 with
JWT_SECRET, and verified with the key their header's kid names; everything else is HS256 with
JWT_SECRET. This module is the one place tokens are verified: every API (and Realtime) calls it."""

import functools
import hashlib
import hmac
import math
import time
from datetime import UTC, datetime

import jwt

ISSUER = "minibase"
ALGORITHM = "HS256"
API_KEY_ROLES = ("anon", "service_role")
API_KEY_LIFETIME = 10 * 365 * 24 * 3600
REFRESH_TYPE = "refresh"
UUID_PREFIX = "00000000-0000-0000-0000-"  # user 42 in UUID form: 00000000-0000-0000-0000-000000000042
STATE_TYPE = "oauth_state"


class TokenError(Exception):
    """A token that is malformed, wrongly signed, of the wrong kind, or expired."""

    def __init__(self, message, expired=False):
        super().__init__(message)
        self.expired = expired

    @property
    def cause(self):
        """What was wrong, without the "invalid token: " every message starts with."""
        return str(self).removeprefix("invalid token: ")


def keyed_hash(text, secret):
    """What the database keeps of a secret it must recognise (a link token, a code, an auth code):
    an HMAC keyed with the JWT secret, so that a copy of the database replays none of them."""
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def now():
    """Seconds since the epoch; the one clock, so tests can move it."""
    return int(time.time())


def utcnow():
    """The clock as a naive UTC datetime, for database columns."""
    return datetime.fromtimestamp(now(), UTC).replace(tzinfo=None)


def _verify(token, secret, require, issuer=ISSUER, algorithms=(ALGORITHM,), **kwargs):
    """The claims of a token with a valid signature by `secret` (a public key with its one
    algorithm, or the HS256 secret), the issuer (any, when None) and the `require`d claims. Expiry
    is not checked here but against our clock, in _decode."""
    if not token.isascii():  # a JWT is base64url and dots; pyjwt cannot even encode some other text
        raise TokenError("invalid token: not ASCII")
    options = {"require": require, "verify_exp": False, "verify_iat": False, "verify_nbf": False}
    try:
        claims = jwt.decode(
            token, secret, algorithms=list(algorithms), issuer=issuer, options=options, **kwargs
        )
    except jwt.PyJWTError as exc:
        raise TokenError(f"invalid token: {exc}") from None
    expires = claims.get("exp", 0)
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        raise TokenError("invalid token: exp is not a number")
    return claims


def _decode(token, secret, require, **kwargs):
    return _unexpired(_verify(token, secret, require, **kwargs))


def _unexpired(claims):
    if claims["exp"] <= now():
        raise TokenError("token has expired", expired=True)
    return claims


def api_key(role, secret):
    """The API key for `role`; stable within a year, so printing it again gives the same key."""
    year_start = int(datetime(datetime.fromtimestamp(now(), UTC).year, 1, 1, tzinfo=UTC).timestamp())
    claims = {"role": role, "iss": ISSUER, "iat": year_start, "exp": year_start + API_KEY_LIFETIME}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def api_key_role(token, keys):
    """The role of a valid API key, or None when `token` is not one. `keys`: the keyring (JWT_KEYS),
    or the JWT secret alone."""
    role, expires = _verified_api_key(token, keys)
    return role if role is not None and expires > now() else None


@functools.lru_cache(maxsize=256)
def _verified_api_key(token, keys):
    """(role, exp) of a well-signed API key, or (None, 0). As at Supabase, any issuer will do and a
    key without `exp` never expires: a self-hosted Supabase's keys keep working when its secret is
    kept. A key with a kid is verified as an access token is, by the signing key it names (the
    Supabase CLI signs its anon and service_role keys with its RS256 key). Every request carries the
    same few keys, so their verification is remembered; only expiry is checked each time."""
    if not token.isascii():  # before the header is read: pyjwt cannot even encode some other text
        return None, 0
    try:
        key, algorithms = (keys, [ALGORITHM]) if isinstance(keys, str) else verification_key(token, keys)
        claims = _verify(token, key, ["role"], issuer=None, algorithms=algorithms)
    except TokenError:
        return None, 0
    if claims["role"] not in API_KEY_ROLES or "aud" in claims or "sub" in claims:
        return None, 0
    return claims["role"], claims.get("exp", math.inf)


def access_claims(claims, lifetime):
    """The claims of an access token issued now."""
    issued = now()
    return {
        "iss": ISSUER,
        "aud": "authenticated",
        "role": "authenticated",
        "iat": issued,
        "exp": issued + lifetime,
        **claims,
    }


def access_token(claims, secret, lifetime):
    """An HS256 access token of `secret`, issued now; (token, exp). What tests and tools mint: the
    service signs its own with sign_access_claims, by the keyring."""
    payload = access_claims(claims, lifetime)
    return jwt.encode(payload, secret, algorithm=ALGORITHM), payload["exp"]


def sign_access_claims(payload, keyring):
    """`payload` signed as access tokens are: with the keyring's signing key and its kid, or HS256
    with the secret when no signing keys are configured."""
    if keyring.signing is None:
        return jwt.encode(payload, keyring.secret, algorithm=ALGORITHM)
    key = keyring.signing
    return jwt.encode(payload, key.private_key, algorithm=key.algorithm, headers={"kid": key.kid})


def verification_key(token, keyring):
    """(key, [algorithm]) a token's signature must verify with, chosen by its header's kid: a token
    without one is an HS256 token of JWT_SECRET (legacy keys, tokens issued before signing keys);
    a kid names one of JWT_SIGNING_KEYS and that key's one algorithm, so a token cannot choose how
    it is checked (an HS256 header over a public key, an RS256 header on an EC key). A kid that
    names no key is refused."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenError(f"invalid token: {exc}") from None
    kid = header.get("kid")
    if kid is None:
        return keyring.secret, [ALGORITHM]
    key = keyring.verifying.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise TokenError("invalid token: its kid names no signing key")
    return key.public_key, [key.algorithm]


def decode_access_token(token, keyring):
    """The claims of a valid access token. Refresh tokens and API keys fail: they have no audience."""
    claims = _unexpired(dict(_verified_access_token(token, keyring)))
    if claims.get("role") != "authenticated" or claims.get("typ") == REFRESH_TYPE:
        raise TokenError("not an access token")
    if not isinstance(claims["session_id"], str) or user_id_of(claims["sub"]) is None:
        raise TokenError("malformed claims")
    return claims


def subject(user_id, uuid_form=False):
    """A user id as tokens and the SDKs carry it: "42", or with UUID_USER_IDS its UUID form."""
    return f"{UUID_PREFIX}{user_id:012d}" if uuid_form else str(user_id)


def user_id_of(sub):
    """The integer user id of a `subject` in either form, or None."""
    digits = sub.removeprefix(UUID_PREFIX) if len(sub) == 36 else sub
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 18 else None


@functools.lru_cache(maxsize=1024)
def _verified_access_token(token, keyring):
    """The claims of a well-signed token with an audience. A client presents its access token on
    every request for up to an hour, so its signature is checked once; expiry each time. A token
    that fails raises, and failures are not remembered."""
    if not token.isascii():
        raise TokenError("invalid token: not ASCII")
    key, algorithms = verification_key(token, keyring)
    required = ["iat", "exp", "sub", "session_id", "aud"]
    return _verify(token, key, required, algorithms=algorithms, audience="authenticated")


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
    claims = _decode(token, secret, ["iat", "exp", "jti", "sid"])
    if claims.get("typ") != REFRESH_TYPE or "aud" in claims or not isinstance(claims["jti"], str):
        raise TokenError("not a refresh token")
    return claims


def oauth_state(flow_id, secret, lifetime):
    """The `state` of a third-party sign-in: the flow it belongs to, signed, expiring."""
    issued = now()
    payload = {"iss": ISSUER, "typ": STATE_TYPE, "flow": flow_id, "iat": issued, "exp": issued + lifetime}
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def decode_oauth_state(token, secret):
    """The flow id of a valid `state`; any other token of ours (an access token, a refresh token)
    fails for want of its type."""
    claims = _decode(token, secret, ["iat", "exp", "flow", "typ"])
    if claims["typ"] != STATE_TYPE or not isinstance(claims["flow"], str):
        raise TokenError("not an OAuth state")
    return claims["flow"]
