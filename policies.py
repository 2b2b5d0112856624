"""tables.toml: which tables /rest/v1 exposes, and who may do what on each. The one place a rule
is decided: the table API asks `authorize` for a Grant, and a Grant's condition keeps an owner to
their rows. (tables.py, despite its name, does not read tables.toml: it reflects the database.)"""

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from config import ConfigError
from errors import APIError, Rest
from extensions import state
from models import SERVICE_TABLES

OPERATIONS = ("select", "insert", "update", "delete")
RULES = ("anon", "authenticated", "owner", "service_role")
TABLE_KEYS = frozenset({*OPERATIONS, "owner_column"})
# Any table of the service, present or future, carries this prefix (models.SERVICE_TABLES).
SERVICE_PREFIX = "minibase_"


@dataclass(frozen=True)
class Policy:
    table: str
    rules: dict  # operation -> rule
    owner_column: str | None = None


@dataclass(frozen=True)
class Grant:
    """Permission for one operation; `owner_id` set means only the rows that user owns."""

    policy: Policy
    owner_id: int | None = None

    def condition(self, table):
        """The WHERE condition that keeps an owner to their rows, or None."""
        if self.owner_id is None:
            return None
        return table.c[self.policy.owner_column] == self.owner_id

    def owns(self, value):
        """Whether an owner_column value names the granted owner (always true without an owner rule)."""
        return self.owner_id is None or str(value) == str(self.owner_id)

    def check_owner(self, values):
        """A 403 when the column values of a write set the owner to another user than the granted one."""
        column = self.policy.owner_column
        if column in values and not self.owns(values[column]):
            raise denied("permission denied to set the owner of a row to another user")


def init_app(app):
    """Load and check TABLES_CONFIG at start; refuse to start when it cannot work."""
    path = app.config.get("TABLES_CONFIG")
    policies = {} if path is None else load(path, app.config["USERS_TABLE"])
    app.extensions["minibase"].policies = policies


def load(path, users_table):
    """The policies of a tables.toml file; a ConfigError that says what is wrong otherwise."""
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
    """{table name: Policy} from a parsed tables.toml document."""
    unknown = sorted(set(document) - {"tables"})
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key {unknown[0]!r}; expected only [tables.NAME]")
    tables = document.get("tables", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: 'tables' must be a table of [tables.NAME] sections")
    forbidden = {users_table.strip().casefold()} | {name.casefold() for name in SERVICE_TABLES}
    return {name: _policy(name, entry, forbidden, source) for name, entry in tables.items()}


def _policy(name, entry, forbidden, source):
    where = f"{source}: [tables.{name}]"
    folded = name.strip().casefold()
    if not name.strip() or any(ord(char) < 32 for char in name):
        raise ConfigError(f"{where}: a table name must be non-empty and printable")
    if folded in forbidden or folded.startswith(SERVICE_PREFIX):
        raise ConfigError(
            f"{where}: the users table and the service's own tables ({SERVICE_PREFIX}*) "
            "can never be exposed through /rest/v1"
        )
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table of rules")
    unknown = sorted(set(entry) - TABLE_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}; expected {', '.join(OPERATIONS)} or owner_column"
        )
    rules = {}
    for operation in OPERATIONS:
        rule = entry.get(operation, "service_role")
        if rule not in RULES:
            raise ConfigError(f"{where}: {operation} = {rule!r} is not one of {', '.join(RULES)}")
        rules[operation] = rule
    owner_column = entry.get("owner_column")
    if owner_column is not None and (not isinstance(owner_column, str) or not owner_column.strip()):
        raise ConfigError(f"{where}: owner_column must be a column name")
    if owner_column is None and "owner" in rules.values():
        raise ConfigError(f"{where}: a rule is 'owner', so owner_column must name the owner's column")
    return Policy(name, rules, owner_column)


def policies():
    return state().policies


def lookup(name):
    """The policy of an exposed table; a 404 naming the nearest exposed one otherwise."""
    policy = policies().get(name)
    if policy is None:
        nearest = difflib.get_close_matches(name, list(policies()), n=1) if len(name) <= 100 else []
        raise APIError(
            404,
            Rest.TABLE_NOT_FOUND,
            f"Could not find the table '{name[:100]}'",
            hint=f"Perhaps you meant the table '{nearest[0]}'" if nearest else None,
        )
    return policy


def authorize(policy, operation, who):
    """The Grant for `who` to do `operation` on the table; 401 (anon) or 403 (signed in) when refused."""
    rule = policy.rules[operation]
    if who.role == "service_role" or rule == "anon":
        return Grant(policy)
    if who.role == "authenticated" and rule == "authenticated":
        return Grant(policy)
    if who.role == "authenticated" and rule == "owner":
        return Grant(policy, owner_id=who.user_id)
    status = 401 if who.role == "anon" else 403
    hint = "Only the service key may do this." if rule == "service_role" else "Sign in first."
    raise denied(f"permission denied for table '{policy.table}'", status, hint)


def denied(message, status=403, hint=None):
    """The error for what a rule refuses: 401 to an anonymous caller, 403 to a signed-in one."""
    return APIError(status, Rest.INSUFFICIENT_PRIVILEGE, message, hint=hint)
