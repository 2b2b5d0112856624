"""The Settings page's work: whether what minibase depends on answers (the database, SMTP, Redis,
storage), the migration the database is at, and the effective settings with every secret masked.
Each probe is bounded by PROBE_SECONDS and says what failed by its kind, never with a password.
And /ready's: what keeps the service from being ready to serve (`not_ready`)."""

import functools
import os
import smtplib
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa

import config
import variables
from config import setting
from database import failures, transactions
from extensions import db, state
from storage import files

PROBE_SECONDS = 3
READY_SECONDS = 1  # how long /ready waits on Redis: a probe is asked every few seconds
SECRET_WORDS = ("SECRET", "PASS", "KEY")  # JWT_SECRET, SMTP_PASS, S3_SECRET_ACCESS_KEY, MFA_ENCRYPTION_KEY…
MASK = "••••••"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: not in use
    detail: str


def checks():
    return [_database(), _smtp(), _redis(), _storage()]


def _database():
    try:
        transactions.read(lambda: db.session.execute(sa.text("SELECT 1")).scalar())
    except sa.exc.SQLAlchemyError as exc:
        return Check("Database", False, f"not answering ({failures.describe(exc)})")
    return Check("Database", True, f"answering ({db.engine.dialect.name})")


def _smtp():
    host, port = setting("SMTP_HOST"), setting("SMTP_PORT")
    if not host:
        return Check("SMTP", None, "not configured: e-mails are written to the log")
    try:
        if setting("SMTP_SECURITY") == "ssl":
            server = smtplib.SMTP_SSL(host, port, timeout=PROBE_SECONDS, context=ssl.create_default_context())
        else:
            server = smtplib.SMTP(host, port, timeout=PROBE_SECONDS)
        with server:
            server.noop()
    except (OSError, smtplib.SMTPException) as exc:
        return Check("SMTP", False, f"{host}:{port} not answering ({type(exc).__name__})")
    return Check("SMTP", True, f"{host}:{port} answering")


def _redis():
    uri = setting("RATE_LIMIT_STORAGE_URI")
    if not uri.startswith(("redis://", "rediss://")):
        return Check("Redis", None, f"not used: rate limits are kept in {uri.partition(':')[0]}")
    import redis  # only where Redis is configured

    try:
        redis.Redis.from_url(uri, socket_timeout=PROBE_SECONDS, socket_connect_timeout=PROBE_SECONDS).ping()
    except redis.RedisError as exc:
        return Check("Redis", False, f"{masked_url(uri)} not answering ({type(exc).__name__})")
    return Check("Redis", True, f"{masked_url(uri)} answering")


def _storage():
    backend = files.backend()
    if setting("STORAGE_BACKEND") == "s3":
        try:
            backend.client.head_bucket(Bucket=backend.bucket)
        except Exception as exc:  # botocore's errors: any of them means unreachable
            return Check("Storage", False, f"S3 bucket {backend.bucket} not answering ({type(exc).__name__})")
        return Check("Storage", True, f"S3 bucket {backend.bucket} answering")
    root = Path(setting("STORAGE_ROOT"))
    if not root.exists():
        return Check("Storage", True, f"{root} is made at the first upload")
    if not (root.is_dir() and os.access(root, os.W_OK)):
        return Check("Storage", False, f"{root} is not a writable folder")
    return Check("Storage", True, f"{root} writable")


def migration_version():
    def read():
        return db.session.execute(sa.text("SELECT version_num FROM minibase_alembic_version")).scalar()

    try:
        return transactions.read(read)
    except sa.exc.SQLAlchemyError:
        return None


@functools.cache
def head_migration():
    """The newest migration this code has."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(config.ROOT / "migrations")).get_current_head()


def not_ready():
    """What keeps the service from serving, as PostgREST's /ready asks it: "database" when it does
    not answer, "migrations" when it is not at this code's newest, "redis" when a configured Redis
    (the rate limits', Realtime's) does not answer. Empty when ready."""
    missing = []
    try:
        transactions.read(lambda: db.session.execute(sa.text("SELECT 1")).scalar())
    except sa.exc.SQLAlchemyError:
        missing.append("database")
    else:
        if not state().database_ready or migration_version() != head_migration():
            missing.append("migrations")
    # Realtime's Redis is REALTIME_REDIS_URL, else the rate limits' (live.bus): these two, at most.
    urls = {setting("REALTIME_REDIS_URL") or "", setting("RATE_LIMIT_STORAGE_URI")}
    urls = sorted(url for url in urls if url.startswith(("redis://", "rediss://")))
    if urls:
        import redis  # only where Redis is configured

        for url in urls:
            try:
                bounded = {"socket_timeout": READY_SECONDS, "socket_connect_timeout": READY_SECONDS}
                redis.Redis.from_url(url, **bounded).ping()
            except (redis.RedisError, OSError):
                missing.append("redis")
                break
    return missing


def masked_url(url):
    """A URL without its password; a value that names a password in a way this cannot read is
    masked whole."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    except ValueError:  # a port that is no number, say
        return MASK if "@" in url else url
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}"))


def effective_settings():
    """(name, value) of every setting, as the service runs with it: secrets masked, passwords taken
    out of URLs."""
    shown = []
    for name in variables.VARIABLES:
        value = setting(name)
        if value is None:
            text = ""
        elif any(word in name for word in SECRET_WORDS) and not name.endswith("_CLIENT_ID"):
            text = MASK
        elif isinstance(value, str) and "://" in value:  # any URL: Redis's, a hook's, S3's
            text = masked_url(value)
        else:
            text = str(value)
        shown.append((name, text))
    return shown
