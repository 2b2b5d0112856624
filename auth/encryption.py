"""TOTP secrets, and the links and codes of mails waiting in the outbox, at rest: sealed with
AES-256-GCM (the `cryptography` package) under a key derived by HKDF-SHA256 from MFA_ENCRYPTION_KEY,
or from JWT_SECRET when that is not set. The row's own id (a factor's id, a mail's token hash) is
the associated data, so a sealed value copied onto another row does not open. A copy of the
database alone gives nothing away.

MFA_ENCRYPTION_KEY may list several keys, comma-separated: the first seals, every one opens (what
rotating the key needs). A sealed value names the key that sealed it by a short fingerprint:
`v1.<key id>.<base64url of nonce + ciphertext>`."""

import base64
import functools
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from config import setting

VERSION = "v1"
INFO = b"minibase mfa secrets v1"
NONCE_BYTES = 12


class SealError(Exception):
    """A sealed value that none of the configured keys opens."""


def key_materials():
    """The configured key materials, the sealing one first."""
    configured = setting("MFA_ENCRYPTION_KEY")
    if not configured:
        return (setting("JWT_SECRET"),)
    return tuple(part.strip() for part in configured.split(",") if part.strip())


@functools.lru_cache(maxsize=16)
def _derive(material):
    """(key id, AES-GCM cipher) for one key material."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(material.encode())
    return hashlib.sha256(key).hexdigest()[:8], AESGCM(key)


def _ciphers():
    return [_derive(material) for material in key_materials()]


def seal(plaintext, context):
    """`plaintext` sealed under the first key, bound to `context` (the factor's id)."""
    key_id, cipher = _ciphers()[0]
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + cipher.encrypt(nonce, plaintext.encode(), context.encode())
    return f"{VERSION}.{key_id}.{base64.urlsafe_b64encode(sealed).decode()}"


def unseal(value, context):
    """The plaintext of a sealed value; SealError when no configured key opens it."""
    version, _, rest = value.partition(".")
    key_id, _, payload = rest.partition(".")
    if version != VERSION:
        raise SealError("not a sealed value")
    for candidate_id, cipher in _ciphers():
        if candidate_id == key_id:
            raw = base64.urlsafe_b64decode(payload)
            try:
                return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode()).decode()
            except InvalidTag:
                raise SealError("the sealed value does not open under its key") from None
    raise SealError(f"no configured key has the id {key_id}")


def is_current(value):
    """Whether `value` was sealed under the current (first) key."""
    return value.split(".")[1:2] == [_ciphers()[0][0]]
