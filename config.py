"""Configuration: the environment variables (and `.env`) README.md's Configuration section lists,
parsed and checked once at start."""

import ipaddress
import json
import logging
import math
import os
import re
import secrets
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from urllib.parse import urlsplit

from dotenv import dotenv_values
from flask import current_app

ROOT = Path(__file__).resolve().parent
INSTANCE = ROOT / "instance"
MIN_SECRET_LENGTH = 32

log = logging.getLogger("minibase")


class ConfigError(RuntimeError):
    """The configuration cannot work; the message says which variable and why."""


def _boolean(name, raw):
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def _text(name, raw):
    return raw


def _seconds(name, raw):
    """A positive number of seconds, fractions allowed."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not 0 < value <= 3600:
        raise ConfigError(f"{name} must be more than 0 and at most 3600 seconds, not {raw}")
    return value


def _choice(name, raw, choices):
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return value


def _integer(name, raw, minimum=0, maximum=None):
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, not {value}")
    return value


def _addresses(name, raw):
    """Comma-separated IP addresses or networks (CIDR), as ipaddress networks."""
    parts = [part for part in raw.replace(" ", "").split(",") if part]
    try:
        return tuple(ipaddress.ip_network(part, strict=False) for part in parts)
    except ValueError:
        raise ConfigError(f"{name} must be IP addresses or networks, comma-separated: {raw!r}") from None


def _keys(name, raw):
    """Comma-separated keys, each as long as a JWT secret must be."""
    keys = [part.strip() for part in raw.split(",") if part.strip()]
    if not keys or any(len(key) < MIN_SECRET_LENGTH for key in keys):
        raise ConfigError(f"{name} must be keys of at least {MIN_SECRET_LENGTH} characters, comma-separated")
    return ",".join(keys)


API_KEY_PREFIXES = {"PUBLISHABLE_KEYS": "sb_publishable_", "SECRET_KEYS": "sb_secret_"}
MIN_API_KEY_RANDOM = 20  # characters after the prefix: Supabase's keys carry 30 or more


def _api_keys(name, raw):
    """A JSON object, key name -> key, each key of the variable's prefix (Supabase's
    SUPABASE_PUBLISHABLE_KEYS / SUPABASE_SECRET_KEYS form)."""
    prefix = API_KEY_PREFIXES[name]
    try:
        keys = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a JSON object of key names and keys: {exc}") from None
    if not isinstance(keys, dict):
        raise ConfigError(f'{name} must be a JSON object of names and keys: {{"default": "{prefix}…"}}')
    for key_name, key in keys.items():
        long_enough = isinstance(key, str) and len(key) - len(prefix) >= MIN_API_KEY_RANDOM
        if not long_enough or not key.startswith(prefix):
            raise ConfigError(
                f"{name}: key {key_name!r} must start with {prefix} followed by at least "
                f"{MIN_API_KEY_RANDOM} characters"
            )
        if not key.isascii() or not key.isprintable() or " " in key:
            raise ConfigError(f"{name}: key {key_name!r} holds spaces or characters not printable ASCII")
    return keys


# Supabase Storage's sizes: a number and a unit, decimal ("20mb" is 20,000,000 bytes), the number
# kept to three significant digits as its parser keeps it; or a bare number of bytes.
SIZE_UNITS = {"B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3}
SIZE = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,15})?)(GB|MB|KB|B)", re.IGNORECASE)
MAX_SIZE = 2**63 - 1  # a BIGINT column, on SQLite and MySQL


def parse_size(raw):
    """Bytes from an integer, a string of digits, or text such as "20mb", "1.5GB", "500kb" as Supabase
    Storage reads it; None when it is none of these or more than a 64-bit column holds (MAX_SIZE)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 19:
        raw = int(raw)
    if isinstance(raw, int):
        return raw if 0 <= raw <= MAX_SIZE else None
    match = SIZE.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        return None
    number = Decimal(f"{float(match[1]):.3g}")  # JavaScript's toPrecision(3)
    size = int((number * SIZE_UNITS[match[2].upper()]).to_integral_value(ROUND_HALF_EVEN))
    return size if size <= MAX_SIZE else None


def _size(name, raw):
    value = parse_size(raw)
    if not value:
        raise ConfigError(f"{name} must be a size such as 50MB, 512kb or 1048576 (bytes), not {raw!r}")
    return value


# name: (default, parser); a default of None means "derived below when unset".
VARIABLES = {
    "DATABASE_URL": ("sqlite:///instance/minibase.db", _text),
    "JWT_SECRET": (None, _text),
    # Asymmetric signing keys (docs/auth.md): a JSON array of private JWKs; checked by auth/signing_keys.py.
    "JWT_SIGNING_KEYS": (None, _text),
    # Supabase's new API keys (docs/auth.md): JSON objects, name -> sb_publishable_… / sb_secret_….
    "PUBLISHABLE_KEYS": ("{}", _api_keys),
    "SECRET_KEYS": ("{}", _api_keys),
    "JWT_EXPIRY": ("3600", lambda n, v: _integer(n, v, 60)),
    "REFRESH_TOKEN_EXPIRY": ("2592000", lambda n, v: _integer(n, v, 60)),
    "REFRESH_TOKEN_REUSE_INTERVAL": ("10", _integer),
    "BCRYPT_ROUNDS": ("10", lambda n, v: _integer(n, v, 4, 31)),  # bcrypt's own bounds
    "USERS_TABLE": ("users", _text),
    "UUID_USER_IDS": ("false", _boolean),
    "TABLES_CONFIG": (None, _text),
    "DISABLE_SIGNUP": ("false", _boolean),
    "RATE_LIMITS": ("on", _boolean),
    "RATE_LIMIT_STORAGE_URI": ("memory://", _text),
    "TRUSTED_PROXIES": ("0", _integer),
    "MAX_ROWS": ("1000", lambda n, v: _integer(n, v, 1)),
    "DB_AGGREGATES_ENABLED": ("false", _boolean),
    "REST_ERROR_CODES": ("status", lambda n, v: _choice(n, v, ("status", "postgrest"))),
    "DB_TX_END": (
        "commit",
        lambda n, v: _choice(
            n, v, ("commit", "commit-allow-override", "rollback", "rollback-allow-override")
        ),
    ),
    "CORS_ORIGINS": ("*", _text),
    "AUTO_MIGRATE": ("true", _boolean),
    "DASHBOARD": ("on", _boolean),  # /dashboard, the operator's screen (docs/dashboard.md)
    "HOST": ("127.0.0.1", _text),
    "PORT": ("8000", lambda n, v: _integer(n, v, 1)),
    "THREADS": ("8", lambda n, v: _integer(n, v, 1)),
    "WORKERS": ("1", lambda n, v: _integer(n, v, 1)),
    "DB_TIMEOUT": ("10", _seconds),
    # Operations (docs/operations.md): the log's format, and GET /metrics with who may read it.
    "LOG_FORMAT": ("text", lambda n, v: _choice(n, v, ("text", "json"))),
    "METRICS": ("off", _boolean),
    "METRICS_ALLOW": ("", _addresses),
    "STATEMENT_TIMEOUT": ("10", _seconds),
    # Realtime (docs/realtime.md): on wherever the server can hold a socket (`python wsgi.py`).
    "REALTIME": ("on", _boolean),
    "REALTIME_MAX_CHANNELS": ("100", lambda n, v: _integer(n, v, 1)),  # per socket
    "REALTIME_MAX_EVENTS": (
        "100",
        lambda n, v: _integer(n, v, 1),
    ),  # broadcasts and presence, per socket per second
    "REALTIME_MAX_JOINS": ("100", lambda n, v: _integer(n, v, 1)),  # per socket per second
    "REALTIME_MAX_MESSAGE": ("256KB", lambda n, v: _size(n, v)),  # a frame's size
    "REALTIME_REDIS_URL": ("", _text),  # several instances: broadcasts and presence through Redis
    "REALTIME_MAX_QUEUE": (
        "1000",
        lambda n, v: _integer(n, v, 10),
    ),  # unread messages before a socket is closed
    # how often the tokens of signed-in channels are verified again: a logout or a ban is seen within it
    "REALTIME_RECHECK_SECONDS": ("2", _seconds),
    # Database webhooks and schedules (docs/webhooks.md).
    "WEBHOOK_SECRET": (None, _text),  # signs what a webhook or schedule without a `secret` sends
    "BACKGROUND": ("on", _boolean),  # `python wsgi.py` sends webhooks and runs schedules
    "WEBHOOK_POLL_SECONDS": ("0.5", _seconds),  # between two looks for new changes of a hook's table
    "WEBHOOK_RETRY_SECONDS": ("1", _seconds),  # the first retry's delay, doubled each time (at most 1 h)
    "WEBHOOK_HISTORY_DAYS": ("7", lambda n, v: _integer(n, v, 1)),  # deliveries and runs kept
    "SCHEDULE_TICK_SECONDS": ("1", _seconds),  # between two looks at the clock
    # E-mail: confirmation, recovery, magic links, one-time codes (README: Password reset and e-mail).
    "MAILER_AUTOCONFIRM": ("true", _boolean),
    # A password change from a session older than 24 hours needs a mailed nonce (GET /reauthenticate).
    "SECURE_PASSWORD_CHANGE": ("false", _boolean),
    # Anonymous sign-ins (docs/auth.md): GoTrue's names; sign-ups per IP per hour.
    "ANONYMOUS_USERS_ENABLED": ("false", _boolean),
    "RATE_LIMIT_ANONYMOUS_USERS": ("30", lambda n, v: _integer(n, v, 1)),
    # Passkeys and WebAuthn (docs/auth.md): GoTrue's names. RP id and origins default to SITE_URL's.
    "PASSKEY_ENABLED": ("false", _boolean),
    "PASSKEY_MAX_PASSKEYS_PER_USER": ("10", lambda n, v: _integer(n, v, 1, 100)),
    "WEBAUTHN_RP_ID": (None, _text),
    "WEBAUTHN_RP_DISPLAY_NAME": (None, _text),
    "WEBAUTHN_RP_ORIGINS": (None, _text),
    "WEBAUTHN_CHALLENGE_EXPIRY_DURATION": ("300", lambda n, v: _integer(n, v, 10, 3600)),
    "RATE_LIMIT_PASSKEY": ("30", lambda n, v: _integer(n, v, 1)),
    # WebAuthn as a second factor (GoTrue's MFA_WEB_AUTHN_*): off, mfa.enroll of it is refused.
    "MFA_WEB_AUTHN_ENROLL_ENABLED": ("false", _boolean),
    "MFA_WEB_AUTHN_VERIFY_ENABLED": ("false", _boolean),
    # Linking and unlinking providers from a signed-in account (GoTrue's name; off, as GoTrue).
    "SECURITY_MANUAL_LINKING_ENABLED": ("false", _boolean),
    "SMTP_HOST": (None, _text),
    "SMTP_PORT": ("587", lambda n, v: _integer(n, v, 1)),
    "SMTP_USER": (None, _text),
    "SMTP_PASS": (None, _text),
    "SMTP_SENDER": ("minibase <noreply@localhost>", _text),
    "SMTP_SECURITY": ("starttls", lambda n, v: _choice(n, v, ("starttls", "ssl", "none"))),
    "SITE_URL": ("http://localhost:3000", _text),
    "API_EXTERNAL_URL": (None, _text),
    "REDIRECT_ALLOW_LIST": ("", _text),
    "OTP_EXPIRY": ("3600", lambda n, v: _integer(n, v, 60)),
    "EMAIL_RATE_LIMIT": ("60", _integer),
    "EMAIL_TEMPLATES": (None, _text),
    # How long a sender holds a mail it is sending before another may (docs/email.md: Delivery).
    "MAIL_LEASE": ("60", lambda n, v: _integer(n, v, 1)),
    # Multi-factor authentication (docs/auth.md): what TOTP secrets are sealed with; JWT_SECRET when unset.
    "MFA_ENCRYPTION_KEY": (None, _keys),
    # Storage (docs/storage.md).
    "STORAGE_ROOT": ("instance/storage", _text),
    "STORAGE_FILE_SIZE_LIMIT": ("52428800", lambda n, v: _size(n, v)),
    "STORAGE_BACKEND": ("disk", lambda n, v: _choice(n, v, ("disk", "s3"))),
    "S3_ENDPOINT": (None, _text),
    "S3_BUCKET": (None, _text),
    "S3_REGION": ("us-east-1", _text),
    "S3_ACCESS_KEY_ID": (None, _text),
    "S3_SECRET_ACCESS_KEY": (None, _text),
    # Backups (docs/operations.md): where archives go, and how many are kept there.
    "BACKUP_TO": ("instance/backups", _text),
    "BACKUP_KEEP": ("7", _integer),
    "BACKUP_SCHEDULE": (None, _text),  # a cron line: backups made by the schedules (webhooks/schedules.py)
    # Functions (docs/functions.md): Python modules run in worker processes under limits.
    "FUNCTIONS": ("on", _boolean),
    "FUNCTIONS_DIR": ("functions", _text),
    "FUNCTIONS_ENV_FILE": (None, _text),
    "FUNCTIONS_TIMEOUT": ("150", _seconds),
    "FUNCTIONS_MEMORY": ("256MB", lambda n, v: _size(n, v)),
    "FUNCTIONS_CPU": ("10", lambda n, v: _integer(n, v, 1)),  # CPU seconds per call
    "FUNCTIONS_CONCURRENCY": ("0", _integer),  # calls at once per process; 0: half of THREADS
    "FUNCTIONS_MAX_CALLS": ("1000", lambda n, v: _integer(n, v, 1)),  # a worker's calls before it is replaced
    "FUNCTIONS_MAX_BODY": ("10MB", lambda n, v: _size(n, v)),
}

# Third-party sign-in (docs/auth.md): GoTrue's EXTERNAL_<PROVIDER>_* names. URL is the provider's
# base URL or OpenID issuer (GitHub Enterprise, a self-hosted GitLab, a Keycloak realm); REDIRECT_URI
# defaults to API_EXTERNAL_URL/auth/v1/callback; CLIENT_ID may list several ids, comma-separated
# (the audiences an ID token may be for: a web client and the apps').
PROVIDERS = ("apple", "azure", "discord", "github", "gitlab", "google", "keycloak")
for _provider in PROVIDERS:
    _prefix = f"EXTERNAL_{_provider.upper()}"
    VARIABLES[f"{_prefix}_ENABLED"] = ("false", _boolean)
    for _part in ("CLIENT_ID", "SECRET", "REDIRECT_URI", "URL"):
        VARIABLES[f"{_prefix}_{_part}"] = (None, _text)


# Auth hooks over HTTP (docs/auth.md): GoTrue's HOOK_<NAME>_ENABLED / _URI / _SECRETS.
HOOKS = (
    "custom_access_token",
    "send_email",
    "before_user_created",
    "password_verification_attempt",
    "mfa_verification_attempt",
)
HOOK_SECRET = re.compile(r"v1,whsec_[A-Za-z0-9+/=]{32,88}")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "host.docker.internal")
for _hook in HOOKS:
    _prefix = f"HOOK_{_hook.upper()}"
    VARIABLES[f"{_prefix}_ENABLED"] = ("false", _boolean)
    VARIABLES[f"{_prefix}_URI"] = (None, _text)
    VARIABLES[f"{_prefix}_SECRETS"] = (None, _text)


def check_hooks(settings):
    """Each enabled hook: an http(s) URI (plain http only to this machine, as GoTrue allows) and
    Standard Webhooks secrets (`v1,whsec_…`, several joined by |), parsed into a list."""
    for hook in HOOKS:
        prefix = f"HOOK_{hook.upper()}"
        raw = settings.get(f"{prefix}_SECRETS")
        secrets_ = [part for part in raw.split("|") if part] if isinstance(raw, str) else list(raw or [])
        settings[f"{prefix}_SECRETS"] = secrets_
        if not settings.get(f"{prefix}_ENABLED"):
            continue
        uri = settings.get(f"{prefix}_URI") or ""
        try:
            parsed = urlsplit(uri)
            host = parsed.hostname
        except ValueError:
            host = None
        if not host or parsed.scheme not in ("http", "https"):
            raise ConfigError(f"{prefix}_URI must be the hook's http(s) URL, not {uri!r} (no pg-functions)")
        if parsed.scheme == "http" and host not in LOOPBACK_HOSTS:
            raise ConfigError(f"{prefix}_URI: plain http is only for a hook on this machine; use https")
        if not secrets_ or not all(HOOK_SECRET.fullmatch(secret) for secret in secrets_):
            raise ConfigError(
                f"{prefix}_SECRETS must be Standard Webhooks secrets, v1,whsec_<base64>, several joined by |"
            )


def setting(name):
    """A setting of the running app, as create_app derived it from the variables above (the app taken
    from Flask's proxy once, as extensions.state does)."""
    return current_app._get_current_object().config[name]


def from_environment(environ=None):
    """The settings from `.env` overlaid by the real environment, parsed."""
    if environ is None:
        environ = {**dotenv_values(ROOT / ".env"), **os.environ}
    settings = {}
    for name, (default, parse) in VARIABLES.items():
        raw = environ.get(name)
        raw = default if raw is None or raw == "" else raw
        settings[name] = None if raw is None else parse(name, raw)
    return settings


def absolute_sqlite_url(url):
    """Anchor a relative SQLite path at the project root, so the working directory does not matter."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == "sqlite://" or url.startswith(prefix + "/"):
        return url
    path, _, query = url[len(prefix) :].partition("?")
    if path in ("", ":memory:"):
        return url
    return prefix + str(ROOT / path) + (f"?{query}" if query else "")


def jwt_secret(configured, instance=INSTANCE):
    """The configured secret, or one generated once into instance/ (safe when two instances start at once)."""
    if configured:
        if len(configured) < MIN_SECRET_LENGTH:
            raise ConfigError(f"JWT_SECRET must be at least {MIN_SECRET_LENGTH} characters long")
        return configured
    path = Path(instance) / "jwt_secret"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Written aside, then linked into place: a racing instance sees no file or a whole one.
        draft = path.with_name(f".jwt_secret.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(48))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        else:
            log.warning(
                "JWT_SECRET is not set: generated one into %s. Set JWT_SECRET to the same value on "
                "every instance that shares this database.",
                path,
            )
        finally:
            draft.unlink()
    secret = path.read_text().strip()
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"{path} holds a secret shorter than {MIN_SECRET_LENGTH} characters")
    return secret


def flask_settings(settings):
    """What the Flask app and its extensions read, derived from the settings."""
    url = absolute_sqlite_url(settings["DATABASE_URL"])
    if url.startswith("sqlite:///") and url != "sqlite://":
        Path(url[len("sqlite:///") :].partition("?")[0]).parent.mkdir(parents=True, exist_ok=True)
    tables = settings["TABLES_CONFIG"]
    if tables is None and (ROOT / "tables.toml").exists():
        tables = str(ROOT / "tables.toml")
    storage_root = Path(settings["STORAGE_ROOT"])
    functions_dir = Path(settings["FUNCTIONS_DIR"])
    env_file = settings["FUNCTIONS_ENV_FILE"]
    if env_file and not Path(env_file).is_file():
        raise ConfigError(f"FUNCTIONS_ENV_FILE must name a file of NAME=value lines: {env_file} is not one")
    if settings["STORAGE_BACKEND"] == "s3" and not settings["S3_BUCKET"]:
        raise ConfigError("STORAGE_BACKEND=s3 needs S3_BUCKET (and S3_ENDPOINT unless it is AWS)")
    for provider in PROVIDERS:
        prefix = f"EXTERNAL_{provider.upper()}"
        if settings.get(f"{prefix}_ENABLED") and not (settings.get(f"{prefix}_CLIENT_ID") or "").strip(" ,"):
            raise ConfigError(f"{prefix}_ENABLED is true: {prefix}_CLIENT_ID must be set too")
    shared = set(settings["PUBLISHABLE_KEYS"].values()) & set(settings["SECRET_KEYS"].values())
    if shared:
        raise ConfigError("PUBLISHABLE_KEYS and SECRET_KEYS share a key: each key has one role")
    check_hooks(settings)
    webauthn = relying_party(settings)
    templates = settings["EMAIL_TEMPLATES"]
    if templates and not Path(templates).is_dir():
        raise ConfigError(f"EMAIL_TEMPLATES must be a folder of templates: {templates} is not one")
    external = settings["API_EXTERNAL_URL"] or f"http://{settings['HOST']}:{settings['PORT']}"
    return {
        **settings,
        **webauthn,
        "API_EXTERNAL_URL": external.rstrip("/"),
        "DATABASE_URL": url,
        "TABLES_CONFIG": tables,
        "STORAGE_ROOT": str(storage_root if storage_root.is_absolute() else ROOT / storage_root),
        "FUNCTIONS_DIR": str(functions_dir if functions_dir.is_absolute() else ROOT / functions_dir),
        "SQLALCHEMY_DATABASE_URI": url,
        "SQLALCHEMY_ENGINE_OPTIONS": engine_options(url, settings["DB_TIMEOUT"], settings["THREADS"]),
        "MAX_CONTENT_LENGTH": 1024 * 1024,
        "RATELIMIT_ENABLED": settings["RATE_LIMITS"],
        "RATELIMIT_STORAGE_URI": settings["RATE_LIMIT_STORAGE_URI"],
        "RATELIMIT_HEADERS_ENABLED": True,
        # A shared store that stops answering degrades to per-instance limits, not to errors.
        "RATELIMIT_IN_MEMORY_FALLBACK_ENABLED": True,
    }


def relying_party(settings):
    """WEBAUTHN_RP_ID, _RP_ORIGINS (a list) and _RP_DISPLAY_NAME, defaulting to SITE_URL's host and
    origin as GoTrue's set-up suggests; every origin must be the RP id's host or a subdomain of it,
    or no browser would make a credential for it."""
    site = urlsplit(settings.get("SITE_URL") or "")
    rp_id = (settings.get("WEBAUTHN_RP_ID") or site.hostname or "").strip().lower()
    raw = settings.get("WEBAUTHN_RP_ORIGINS")
    if isinstance(raw, str | type(None)):
        default = [f"{site.scheme}://{site.netloc}"] if site.netloc else []
        parts = raw.split(",") if raw else default
        origins = [part.strip().rstrip("/") for part in parts if part.strip()]
    else:
        origins = list(raw)
    for origin in origins:
        parsed = urlsplit(origin)
        host = parsed.hostname or ""
        if parsed.scheme not in ("http", "https") or parsed.path or not host:
            raise ConfigError(f"WEBAUTHN_RP_ORIGINS: {origin!r} is not an origin such as https://app.example")
        if host != rp_id and not host.endswith("." + rp_id):
            where = f"WEBAUTHN_RP_ORIGINS: {origin!r}"
            raise ConfigError(f"{where} is not on {rp_id!r} (WEBAUTHN_RP_ID) or a subdomain of it")
    return {
        "WEBAUTHN_RP_ID": rp_id,
        "WEBAUTHN_RP_ORIGINS": origins,
        "WEBAUTHN_RP_DISPLAY_NAME": settings.get("WEBAUTHN_RP_DISPLAY_NAME") or rp_id or "minibase",
    }


def engine_options(url, db_timeout, threads=8):
    """SQLAlchemy's engine options: no parameters in error texts, and every wait bounded by
    DB_TIMEOUT (connecting, reading, writing, waiting for a pooled connection). On MySQL the pool
    keeps a connection for each of the THREADS: with fewer, a busy server opened and closed one a
    request (a TCP handshake, a TLS context, five SETs), a third of its time on key reads."""
    # Parameters can hold password hashes: keep them out of exception texts and logs.
    options = {"hide_parameters": True}
    if url.startswith("mysql"):
        seconds = max(1, math.ceil(db_timeout))
        # Shared hosts drop idle connections; READ COMMITTED lets a waiting refresh see its winner.
        options.update(pool_recycle=280, isolation_level="READ COMMITTED")  # pings: database.connections
        options.update(pool_timeout=db_timeout, pool_size=max(5, threads))
        options["connect_args"] = {
            "connect_timeout": seconds,
            "read_timeout": seconds,
            "write_timeout": seconds,
        }
    return options
