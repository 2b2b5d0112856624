"""Signed URL tokens: HS256 JWTs made with JWT_SECRET, bound to one bucket and object name and to
one purpose (a download or an upload), worthless after they expire. They carry no `role` and no
`sub`, so they are neither an API key nor a user's access token."""

import hashlib
import hmac
import time

import jwt

from config import setting
from errors import Storage, storage_error
from values import whole_number

DOWNLOAD = "storage.download"
UPLOAD = "storage.upload"
UPLOAD_LIFETIME = 2 * 3600  # seconds, as Supabase Storage's signed upload URLs
MAX_LIFETIME = 10 * 365 * 24 * 3600


def now():
    """Seconds since the epoch; the one clock of signed URLs, so tests can move it."""
    return int(time.time())


def sign(bucket_id, name, purpose, lifetime, **claims):
    issued = now()
    body = {
        "url": f"{bucket_id}/{name}",
        "purpose": purpose,
        "iat": issued,
        "exp": issued + lifetime,
        **claims,
    }
    return jwt.encode(body, setting("JWT_SECRET"), algorithm="HS256")


def verify(token, bucket_id, name, purpose):
    """The claims of a token signed for `purpose` on exactly this object; a 400 otherwise."""
    try:
        claims = jwt.decode(
            token or "",
            setting("JWT_SECRET"),
            algorithms=["HS256"],
            options={"require": ["exp", "url", "purpose"]},
        )
    except jwt.ExpiredSignatureError:
        raise storage_error(
            400, Storage.INVALID_JWT, "The provided token has expired.", "InvalidJWT"
        ) from None
    except jwt.PyJWTError:
        raise storage_error(400, Storage.INVALID_JWT, "Invalid JWT", "InvalidJWT") from None
    if claims.get("purpose") != purpose or claims.get("url") != f"{bucket_id}/{name}":
        raise storage_error(
            400, Storage.INVALID_SIGNATURE, "The signature does not match this object", "InvalidSignature"
        )
    return claims


def account_of(who):
    """A mark of the signed-in user `who`'s account: their id and when they joined, keyed with
    JWT_SECRET (a URL shows neither). An account another program deleted and made again under the
    same id (SQLite reuses rowids; an AUTO_INCREMENT can be reset) bears another mark."""
    account = f"{who.user_id}:{who.user.joined}".encode()
    return hmac.new(setting("JWT_SECRET").encode(), account, hashlib.sha256).hexdigest()[:32]


def lifetime(value):
    """expiresIn of a sign request: a whole number of seconds, 1 to ten years (as a number or text)."""
    seconds = whole_number(value)
    if seconds is None or not 0 < seconds <= MAX_LIFETIME:
        raise storage_error(400, Storage.INVALID_REQUEST, "expiresIn must be a number of seconds, at least 1")
    return seconds
