"""tables.toml: which tables /rest/v1 exposes and who may do what on each, the row policies that
say which rows, and the named SQL functions /rest/v1/rpc runs. The one place a rule is decided: the
table API asks `authorize` for a Grant, and a Grant's condition keeps a caller to the rows its
owner rule and its row policy admit (rest/reflection.py reflects the database)."""

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from config import ConfigError
from errors import APIError, Rest
from extensions import state
from models import SERVICE_TABLES
from row_policies import OPERATIONS, RULES, RowPolicy, applying, rule_words
from row_policies import parse as row_policies_section

TABLE_KEYS = frozenset(
    {*OPERATIONS, "owner_column", "columns", "primary_key", "references", "policies", "realtime"}
)
FUNCTION_KEYS = frozenset({"sql", "execute", "returns", "writes", "defaults", "table"})
RETURNS = ("rows", "one", "scalar", "void")
# Any table of the service, present or future, carries this prefix (models.SERVICE_TABLES).
SERVICE_PREFIX = "minibase_"


@dataclass(frozen=True)
class Policy:
    table: str
    rules: dict  # operation -> rule
    owner_column: str | None = None
    columns: tuple | None = None  # the only columns the API shows and takes; None: all of them
    primary_key: str | None = None  # for a view: its default order
    read_only: bool = False  # the users table: it changes through /auth/v1 only
    references: tuple = ()  # (column, table, column): foreign keys the database does not declare
    row_policies: dict = field(default_factory=dict)  # operation -> RowPolicy ([tables.NAME.policies])
    realtime: bool = False  # its changes reach Realtime's subscribers (live/capture.py)


@dataclass(frozen=True)
class Grant:
    """Permission for one operation; `owner_id` set means only the rows that user owns; `using`,
    the row policy that chooses the rows it touches; `check`, the one rows it writes must pass;
    `values`, the policies' parameters for this caller."""

    policy: Policy
    owner_id: int | None = None
    using: RowPolicy | None = None
    check: RowPolicy | None = None
    values: dict = field(default_factory=dict)

    def condition(self, table, named=False):
        """The WHERE condition that keeps a caller to the rows it may touch, or None. `named`: the
        owner's id and the policy's parameters have no value of their own, for a plan that every
        caller's request runs with its own (`plan_values`)."""
        parts = []
        if self.owner_id is not None:
            column = table.c[self.policy.owner_column]
            owner = sa.bindparam("owner", type_=column.type, required=True) if named else self.owner_id
            parts.append(column == owner)
        if self.using is not None:
            parts.append(self.using.clause(table, None if named else self.values))
        return None if not parts else parts[0] if len(parts) == 1 else sa.and_(*parts)

    def plan_values(self):
        """The values of condition(named=True)'s parameters."""
        # Every parameter the policy names: an app_metadata key the caller lacks is NULL.
        values = {name: self.values.get(name) for name in self.using.params} if self.using else {}
        if self.owner_id is not None:
            values["owner"] = self.owner_id
        return values

    def owns(self, value):
        """Whether an owner_column value names the granted owner (always true without an owner rule)."""
        return self.owner_id is None or str(value) == str(self.owner_id)

    def check_owner(self, values):
        """A 403 when the column values of a write set the owner to another user than the granted one."""
        column = self.policy.owner_column
        if column in values and not self.owns(values[column]):
            raise denied("permission denied to set the owner of a row to another user")


@dataclass(frozen=True)
class Function:
    """A [functions.NAME] of tables.toml: one SQL statement, who may run it, what it returns, and
    whether it may change data. `params` are the :names it binds (`uid` is the caller's id)."""

    name: str
    sql: str
    rule: str
    returns: str = "rows"
    writes: bool = False
    params: tuple = ()
    defaults: dict = field(default_factory=dict)  # values of arguments a call may leave out
    table: str | None = None  # the exposed table whose rows it returns (PostgreSQL's SETOF table)


def init_app(app):
    """Load and check TABLES_CONFIG at start; refuse to start when it cannot work."""
    path = app.config.get("TABLES_CONFIG")
    tables, functions = ({}, {}) if path is None else load(path, app.config["USERS_TABLE"])
    app.extensions["minibase"].policies = tables
    app.extensions["minibase"].functions = functions


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
    """({table name: Policy}, {function name: Function}) from a parsed tables.toml document."""
    # [buckets.NAME] belong to Storage (storage.buckets reads them from the same file).
    # [realtime] belongs to Realtime's private channels (live.topics reads it from the same file).
    unknown = sorted(set(document) - {"tables", "functions", "buckets", "realtime"})
    if unknown:
        raise ConfigError(
            f"{source}: unknown top-level key {unknown[0]!r}; expected [tables.NAME], [functions.NAME], "
            "[buckets.NAME] and [realtime]"
        )
    tables, functions = document.get("tables", {}), document.get("functions", {})
    for key, value in (("tables", tables), ("functions", functions)):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a table of [{key}.NAME] sections")
    forbidden = {name.casefold() for name in SERVICE_TABLES}
    users = users_table.strip().casefold()
    policies = {name: _policy(name, entry, forbidden, users, source) for name, entry in tables.items()}
    functions = {name: _function(name, entry, source) for name, entry in functions.items()}
    for function in functions.values():
        if function.table is not None and function.table not in policies:
            where = f"{source}: [functions.{function.name}]"
            raise ConfigError(f"{where}: table = {function.table!r} is not a table of [tables]")
    return policies, functions


def _function(name, entry, source):
    where = f"{source}: [functions.{name}]"
    if not name.strip() or any(ord(char) < 32 for char in name) or "/" in name:
        raise ConfigError(f"{where}: a function name must be non-empty, printable and without '/'")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table with sql, execute, returns and writes")
    unknown = sorted(set(entry) - FUNCTION_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(sorted(FUNCTION_KEYS))}")
    sql = entry.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError(f"{where}: sql must be one SQL statement")
    rule = entry.get("execute", "service_role")
    if rule not in RULES:
        raise ConfigError(f"{where}: execute = {rule!r} is not one of {', '.join(RULES)}")
    returns = entry.get("returns", "rows")
    if returns not in RETURNS:
        raise ConfigError(f"{where}: returns = {returns!r} is not one of {', '.join(RETURNS)}")
    writes = entry.get("writes", False)
    if not isinstance(writes, bool):
        raise ConfigError(f"{where}: writes must be true or false")
    params = tuple(sa.text(sql).compile().params)  # the :names SQLAlchemy will bind
    defaults = entry.get("defaults", {})
    if not isinstance(defaults, dict) or not set(defaults) <= set(params) - {"uid"}:
        raise ConfigError(f"{where}: defaults must be a table of values for the :names of its sql")
    table = entry.get("table")
    if table is not None and (not isinstance(table, str) or returns not in ("rows", "one") or writes):
        raise ConfigError(
            f'{where}: table names the exposed table whose rows a function of returns = "rows" or '
            '"one" without writes reads'
        )
    return Function(name, sql.strip().rstrip(";"), rule, returns, writes, params, defaults, table)


def _policy(name, entry, forbidden, users, source):
    where = f"{source}: [tables.{name}]"
    folded = name.strip().casefold()
    if not name.strip() or any(ord(char) < 32 for char in name):
        raise ConfigError(f"{where}: a table name must be non-empty and printable")
    if folded in forbidden or folded.startswith(SERVICE_PREFIX):
        raise ConfigError(f"{where}: the service's own tables ({SERVICE_PREFIX}*) can never be exposed")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table of rules")
    unknown = sorted(set(entry) - TABLE_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}; expected {', '.join(OPERATIONS)}, owner_column, "
            "columns, primary_key, references, policies or realtime"
        )
    columns = entry.get("columns")
    if columns is not None and (
        not isinstance(columns, list)
        or not columns
        or not all(isinstance(c, str) and c.strip() for c in columns)
    ):
        raise ConfigError(f"{where}: columns must be a list of column names")
    primary_key = entry.get("primary_key")
    if primary_key is not None and (not isinstance(primary_key, str) or not primary_key.strip()):
        raise ConfigError(f"{where}: primary_key must be a column name")
    read_only = folded == users
    if read_only:
        _check_users_listing(where, entry, columns)
    rules = rule_words(where, entry)
    owner_column = entry.get("owner_column")
    if owner_column is not None and (not isinstance(owner_column, str) or not owner_column.strip()):
        raise ConfigError(f"{where}: owner_column must be a column name")
    if owner_column is None and "owner" in rules.values():
        raise ConfigError(f"{where}: a rule is 'owner', so owner_column must name the owner's column")
    references = _references(where, entry.get("references", {}))
    row_policies = row_policies_section(where, name, entry.get("policies", {}))
    if read_only and row_policies:
        raise ConfigError(f"{where}: the users table takes no row policies")
    realtime = entry.get("realtime", False)
    if not isinstance(realtime, bool):
        raise ConfigError(f"{where}: realtime must be true or false")
    return Policy(
        name,
        rules,
        owner_column,
        tuple(columns) if columns else None,
        primary_key,
        read_only,
        references,
        row_policies,
        realtime,
    )


def _references(where, entry):
    """`references = { author_id = "users.user_id" }` as (column, table, column) triples."""
    if not isinstance(entry, dict):
        raise ConfigError(f'{where}: references must be a table such as {{ author_id = "users.user_id" }}')
    found = []
    for column, target in entry.items():
        table, dot, target_column = target.partition(".") if isinstance(target, str) else ("", "", "")
        if not column.strip() or not dot or not table.strip() or not target_column.strip():
            raise ConfigError(
                f'{where}: references.{column} = {target!r} must name a table and its column: "users.user_id"'
            )
        found.append((column, table.strip(), target_column.strip()))
    return tuple(found)


def _check_users_listing(where, entry, columns):
    """The users table may be listed to be read (and embedded), never written, and never with its
    password hashes."""
    if columns is None:
        raise ConfigError(f"{where}: the users table can only be listed with a columns list")
    if "password" in columns:
        raise ConfigError(f"{where}: the users table's password column can never be exposed")
    written = sorted(operation for operation in OPERATIONS[1:] if operation in entry)
    if written:
        raise ConfigError(
            f"{where}: the users table is read-only here ({written[0]} is set): users change through /auth/v1"
        )


def policies():
    return state().policies


def lookup(name):
    """The policy of an exposed table; a 404 naming the nearest exposed one otherwise."""
    return _find(policies(), "table", name, Rest.TABLE_NOT_FOUND)


def functions():
    return state().functions


def lookup_function(name):
    """The function `name`; a 404 naming the nearest one otherwise."""
    return _find(functions(), "function", name, Rest.FUNCTION_NOT_FOUND)


def table_not_found(name, nearest=None):
    """PostgREST's 404 for a table it does not serve."""
    return APIError(
        404,
        Rest.TABLE_NOT_FOUND,
        f"Could not find the table 'public.{name[:100]}' in the schema cache",
        hint=f"Perhaps you meant the table 'public.{nearest}'" if nearest else None,
    )


def _find(registry, kind, name, code):
    found = registry.get(name)
    if found is None:
        nearest = difflib.get_close_matches(name, list(registry), n=1) if len(name) <= 100 else []
        if kind == "table":  # PostgREST's words, the schema named
            raise table_not_found(name, nearest[0] if nearest else None)
        raise APIError(
            404,
            code,
            f"Could not find the {kind} '{name[:100]}'",
            hint=f"Perhaps you meant the {kind} '{nearest[0]}'" if nearest else None,
        )
    return found


def may_execute(function, who):
    """Whether `who` may call `function`: its execute rule, with `owner` meaning any signed-in user
    (a function keeps to its caller's rows through :uid)."""
    rule = function.rule
    if who.role == "service_role" or rule == "anon":
        return True
    return who.role == "authenticated" and rule in ("authenticated", "owner")


def authorize_function(function, who):
    if not may_execute(function, who):
        raise _rule_refused(who, function.rule, f"function '{function.name}'")


def grants(name, who, *operations):
    """The Grant of `who` for each of `operations` on table `name` (None for a None): the 404 of a
    table not exposed, the 405 of a write to a read-only table, or the 401/403 of a refused rule,
    before anything else about the request is looked at."""
    policy = lookup(name)
    if policy.read_only and any(operation not in (None, "select") for operation in operations):
        raise read_only(name, "users change through /auth/v1")
    return [None if operation is None else authorize(policy, operation, who) for operation in operations]


def read_only(name, why):
    return APIError(
        405, Rest.READ_ONLY, f"table '{name}' is read-only: {why}", headers={"Allow": "GET, HEAD"}
    )


def authorize(policy, operation, who):
    """The Grant for `who` to do `operation` on the table, with the row policy that applies (the
    service_role key passes them all); 401 (anon) or 403 (signed in) when the rule refuses."""
    rule = policy.rules[operation]
    if who.role == "service_role":
        return Grant(policy)
    if rule == "anon" or (who.role == "authenticated" and rule in ("authenticated", "owner")):
        owner = who.user_id if rule == "owner" else None
        return Grant(policy, owner, *applying(policy.row_policies, operation, who))
    raise _rule_refused(who, rule, f"table '{policy.table}'")


def violation(table):
    """A row written that its row policy does not admit: PostgreSQL's words for it."""
    return APIError(
        403, Rest.INSUFFICIENT_PRIVILEGE, f'new row violates row-level security policy for table "{table}"'
    )


def _rule_refused(who, rule, what):
    status = 401 if who.role == "anon" else 403
    hint = "Only the service key may do this." if rule == "service_role" else "Sign in first."
    return denied(f"permission denied for {what}", status, hint)


def denied(message, status=403, hint=None):
    """The error for what a rule refuses: 401 to an anonymous caller, 403 to a signed-in one."""
    return APIError(status, Rest.INSUFFICIENT_PRIVILEGE, message, hint=hint)
