"""Every environment variable the service reads: its default, and how its text becomes a value (each
parser raises ConfigError, naming the variable and why). Pure: no Flask, no files; config.py reads
the variables from the environment and `.env` and checks them together."""

import ipaddress
import json
import re
from decimal import ROUND_HALF_EVEN, Decimal

MIN_SECRET_LENGTH = 32


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
