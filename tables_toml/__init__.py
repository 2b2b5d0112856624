"""tables.toml, the operator's declarations: read once when the service starts, checked once, and
held as one TablesToml (extensions.Minibase.tables_toml) that every part takes its section from.
Nothing else opens the file, so what the dashboard shows is what the service enforces.

    tables.py     [tables.NAME] (the table API's rules, row policies, realtime) and [functions.NAME]
    buckets.py    [buckets.NAME]: Storage's declared buckets
    realtime.py   [realtime]: who may use private channels
    webhooks.py   [webhooks.NAME] and [schedules.NAME]: database webhooks and schedules

A new section is one more module here with a pure `parse` over its part of the parsed document, a
field of TablesToml and a line in `parse` below; what the database must say about it (a policy
that compiles) is checked at start by the package that uses it."""

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tables_toml import buckets, realtime, tables, webhooks
from tables_toml.buckets import Declared
from tables_toml.realtime import Rules
from tables_toml.tables import Function, Policy
from tables_toml.webhooks import Schedule, Webhook
from variables import ConfigError

SECTIONS = ("tables", "functions", "buckets", "realtime", "webhooks", "schedules")


@dataclass(frozen=True)
class TablesToml:
    tables: dict[str, Policy] = field(default_factory=dict)  # [tables.NAME]
    functions: dict[str, Function] = field(default_factory=dict)  # [functions.NAME]
    buckets: dict[str, Declared] = field(default_factory=dict)  # [buckets.NAME]
    realtime: Rules | None = None  # [realtime]; None: private channels are the service key's
    webhooks: dict[str, Webhook] = field(default_factory=dict)  # [webhooks.NAME]
    schedules: dict[str, Schedule] = field(default_factory=dict)  # [schedules.NAME]


def load(path, users_table):
    """The TablesToml of the file at `path` (none: an empty one); a ConfigError that says what is
    wrong otherwise, and the service does not start."""
    if path is None:
        return TablesToml()
    try:
        with Path(path).open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"TABLES_CONFIG: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"TABLES_CONFIG: cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"TABLES_CONFIG: {path} is not valid TOML: {exc}") from None
    return parse(document, users_table, source=str(path))


def parse(document, users_table, source="tables.toml"):
    """The TablesToml of a parsed tables.toml document."""
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown top-level key {unknown[0]!r}; expected [tables.NAME], [functions.NAME], "
            "[buckets.NAME], [realtime], [webhooks.NAME] and [schedules.NAME]"
        )
    exposed = tables.parse_tables(document.get("tables", {}), users_table, source)
    hooks, planned = webhooks.parse(document, source)
    return TablesToml(
        tables=exposed,
        functions=tables.parse_functions(document.get("functions", {}), exposed, source),
        buckets=buckets.parse(document.get("buckets", {}), source),
        realtime=realtime.parse(document.get("realtime"), source),
        webhooks=hooks,
        schedules=planned,
    )
