"""bcrypt hashes: new ones at BCRYPT_ROUNDS, legacy ones ($2y$ from PHP, $2a$, $2b$) verified as they are."""

import re
import secrets

import bcrypt

import turns

MAX_BYTES = 72  # bcrypt reads no further; longer passwords are refused, not silently cut
MIN_LENGTH = 6
# A user made by a third-party sign-in gets a "hash" that is no bcrypt hash: nothing verifies
# against it, here or in the application that shares the users table (PHP's password_verify says
# false). 60 characters, so that it fits a CHAR(60) column.
UNUSABLE_PREFIX = "!"
BCRYPT_HASH = re.compile(r"\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53}\Z")


def hash_password(password, rounds, prefix=b"2b"):
    with turns.waiting():  # bcrypt runs outside the interpreter lock: another request may run
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds))
    # $2a$, $2b$ and $2y$ are the same algorithm; keep the family a legacy application expects.
    return (b"$" + prefix + hashed[3:]).decode()


def verify_password(password, hashed):
    """True when `password` matches `hashed`; False for a wrong password or a hash bcrypt cannot read."""
    try:
        with turns.waiting():
            return bcrypt.checkpw(password.encode(), hashed.encode())
    except (ValueError, TypeError, AttributeError):
        return False


def verifiable(hashed):
    """Whether `hashed` is a bcrypt hash a password can be checked against: not a provider's
    unusable hash, an empty column or some other scheme's digest, which bcrypt refuses at once."""
    return isinstance(hashed, str) and BCRYPT_HASH.match(hashed) is not None


def _parts(hashed):
    """(family, cost) of a bcrypt hash such as `$2y$10$…`, or None for anything else."""
    try:
        family, cost = hashed.split("$")[1:3]
        return family.encode(), int(cost)
    except (ValueError, AttributeError):
        return None


def family(hashed):
    """The prefix family (b"2y", b"2a", b"2b") a new hash for this user should keep."""
    parts = _parts(hashed)
    return parts[0] if parts and parts[0] in (b"2a", b"2b", b"2y") else b"2b"


def hash_cost(hashed):
    """The cost of a bcrypt hash, or None for anything else (an MD5 digest, say)."""
    parts = _parts(hashed)
    return parts[1] if parts else None


def needs_rehash(hashed, rounds):
    parts = _parts(hashed)
    return parts is not None and parts[1] < rounds


def dummy_hash(rounds):
    """A hash to check unknown emails against, so they cost the same bcrypt work as known ones."""
    return hash_password("minibase-no-such-user", rounds)


def unusable_hash():
    """A password column value no password matches (see UNUSABLE_PREFIX)."""
    return UNUSABLE_PREFIX + secrets.token_urlsafe(44)[:59]
