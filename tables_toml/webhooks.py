"""tables.toml's [webhooks.NAME] and [schedules.NAME]: the database webhooks and the schedules
(webhooks/ sends and runs them), checked once; a ConfigError names the key that is wrong."""

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

import cronsim

from variables import ConfigError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
EVENTS = ("INSERT", "UPDATE", "DELETE")
SECRET = re.compile(r"(v1,)?whsec_[A-Za-z0-9+/=]{16,}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")  # an HTTP token
DURATION = re.compile(r"([0-9]{1,9})(s|m|h|d)")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_MAX_AGE = 86400  # a delivery is retried for a day (Supabase keeps pg_net's responses 6 h)
DEFAULT_TIMEOUT = 5.0  # Supabase's webhook default: 5000 ms
MAX_TIMEOUT = 600.0
DEFAULT_RUN_TIMEOUT = 300.0  # a schedule's run still going past this (plus a minute) is taken as lost
# cronsim reads five fields only: the shorthands of crontab(5), written out.
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
WEBHOOK_KEYS = frozenset({"table", "events", "url", "function", "headers", "timeout", "secret", "max_age"})
SCHEDULE_KEYS = frozenset({"cron", "function", "url", "sql", "headers", "timeout", "secret"})


@dataclass(frozen=True)
class Target:
    """Where a webhook or a schedule calls: a URL (POSTed to, with `headers`) or a function by name;
    for a schedule also one SQL statement."""

    url: str | None = None
    function: str | None = None
    sql: str | None = None
    headers: dict = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    secret: str | None = None  # None: WEBHOOK_SECRET
    call: object = None  # an internal schedule's Python callable (schedules.register)


@dataclass(frozen=True)
class Webhook:
    name: str
    table: str
    events: tuple
    target: Target
    max_age: int = DEFAULT_MAX_AGE


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str  # five fields (a shorthand written out)
    target: Target
    timeout: float = DEFAULT_RUN_TIMEOUT


def parse(document, source="tables.toml"):
    """({name: Webhook}, {name: Schedule}) of a parsed tables.toml document (its webhooks and
    schedules sections)."""
    found = []
    for section, reader in (("webhooks", _webhook), ("schedules", _schedule)):
        entries = document.get(section, {})
        if not isinstance(entries, dict):
            raise ConfigError(f"{source}: '{section}' must be a table of [{section}.NAME] sections")
        parsed = {}
        for name, entry in entries.items():
            where = f"{source}: [{section}.{name}]"
            if not NAME.fullmatch(name):
                raise ConfigError(f"{where}: a name is 1 to 64 letters, digits, _ or -")
            if not isinstance(entry, dict):
                raise ConfigError(f"{where} must be a table")
            parsed[name] = reader(name, entry, where)
        found.append(parsed)
    return tuple(found)


def _webhook(name, entry, where):
    _known(entry, WEBHOOK_KEYS, where)
    table = entry.get("table")
    if not isinstance(table, str) or not table.strip():
        raise ConfigError(f"{where}: table must name a table")
    if table.casefold().startswith("minibase_"):
        raise ConfigError(f"{where}: table {table!r} is one of the service's own tables")
    events = entry.get("events", list(EVENTS))
    if (
        not isinstance(events, list)
        or not events
        or any(not isinstance(event, str) or event.upper() not in EVENTS for event in events)
    ):
        raise ConfigError(f"{where}: events must be a list of INSERT, UPDATE and DELETE")
    if "sql" in entry:
        raise ConfigError(f"{where}: a webhook's target is url or function, not sql")
    max_age = _duration(entry.get("max_age", DEFAULT_MAX_AGE), f"{where}: max_age")
    events = tuple(event for event in EVENTS if event in {e.upper() for e in events})
    return Webhook(name, table, events, _target(entry, where, ("url", "function")), max_age)


def _schedule(name, entry, where):
    _known(entry, SCHEDULE_KEYS, where)
    line = entry.get("cron")
    if not isinstance(line, str):
        raise ConfigError(f"{where}: cron must be five fields (minute hour day month weekday) or @daily, …")
    line = SHORTHANDS.get(line.strip().lower(), line.strip())
    try:
        cronsim.CronSim(line, datetime.now(UTC))
    except cronsim.CronSimError as exc:
        raise ConfigError(f"{where}: cron {entry['cron']!r} is not a cron line: {exc}") from None
    target = _target(entry, where, ("url", "function", "sql"))
    timeout = entry.get("timeout", DEFAULT_RUN_TIMEOUT if target.url is None else DEFAULT_TIMEOUT)
    return Schedule(name, line, target, _timeout(timeout, where))


def _target(entry, where, kinds):
    chosen = [kind for kind in kinds if kind in entry]
    if len(chosen) != 1:
        raise ConfigError(f"{where}: exactly one target: {' or '.join(kinds)}")
    kind = chosen[0]
    value = entry[kind]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {kind} must be a non-empty string")
    if kind == "url":
        try:
            parsed = urlsplit(value)
            ok = parsed.scheme in ("http", "https") and bool(parsed.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"{where}: url must be an http:// or https:// URL")
    if kind == "function" and not FUNCTION_NAME.fullmatch(value):
        raise ConfigError(f"{where}: function must name a function (letters, digits, _ or -)")
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or any(
        not isinstance(v, str) or not HEADER_NAME.fullmatch(k) or "\n" in v or "\r" in v
        for k, v in headers.items()
    ):
        raise ConfigError(f"{where}: headers must be a table of header names to one-line strings")
    if headers and kind != "url":
        raise ConfigError(f"{where}: headers go with a url target only")
    secret = entry.get("secret")
    if secret is not None and (not isinstance(secret, str) or not SECRET.fullmatch(secret)):
        raise ConfigError(
            f"{where}: secret must be a Standard Webhooks secret, whsec_<base64> (v1, optional)"
        )
    timeout = _timeout(entry.get("timeout", DEFAULT_TIMEOUT), where) if kind != "sql" else DEFAULT_TIMEOUT
    return Target(
        url=value if kind == "url" else None,
        function=value if kind == "function" else None,
        sql=value.strip() if kind == "sql" else None,
        headers=dict(headers),
        timeout=timeout,
        secret=secret,
    )


def _timeout(value, where):
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT:
        raise ConfigError(
            f"{where}: timeout must be a number of seconds, more than 0 and at most {MAX_TIMEOUT:g}"
        )
    return float(value)


def _duration(value, where):
    """Seconds, from a number of them or text such as "90s", "30m", "24h", "7d"."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = DURATION.fullmatch(value.strip().lower()) if isinstance(value, str) else None
    if match is None or int(match[1]) == 0:
        raise ConfigError(f"{where} must be seconds or a duration such as 90s, 30m, 24h, 7d")
    return int(match[1]) * UNITS[match[2]]


def _known(entry, keys, where):
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(sorted(keys))}")
