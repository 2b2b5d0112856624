"""Configuration: the environment variables (and `.env`) docs/configuration.md lists, parsed (each as
variables.py says, raising its ConfigError) and checked together once at start, into the app's
settings; `setting()`, the services' one way to them."""

import logging
import math
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from dotenv import dotenv_values
from flask import current_app

from variables import HOOK_SECRET, HOOKS, LOOPBACK_HOSTS, MIN_SECRET_LENGTH, PROVIDERS, VARIABLES, ConfigError

ROOT = Path(__file__).resolve().parent
INSTANCE = ROOT / "instance"

log = logging.getLogger("minibase")


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
