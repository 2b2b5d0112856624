"""tables.toml's [tables.NAME] (which tables /rest/v1 exposes, who may do what on each, their row
policies, whether Realtime sends their changes) and [functions.NAME] (the named SQL of
/rest/v1/rpc). What a rule grants a caller is rest/policies.py's to decide."""

from dataclasses import dataclass, field

import sqlalchemy as sa

from models import SERVICE_TABLES
from row_policies import OPERATIONS, RULES, rule_words
from row_policies import parse as row_policies_section
from variables import ConfigError

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


def parse_tables(tables, users_table, source="tables.toml"):
    """{table name: Policy} from the document's `tables`."""
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: 'tables' must be a table of [tables.NAME] sections")
    forbidden = {name.casefold() for name in SERVICE_TABLES}
    users = users_table.strip().casefold()
    return {name: _policy(name, entry, forbidden, users, source) for name, entry in tables.items()}


def parse_functions(functions, tables, source="tables.toml"):
    """{function name: Function} from the document's `functions`; `tables`, the parsed [tables.NAME]
    that a function's `table` must name."""
    if not isinstance(functions, dict):
        raise ConfigError(f"{source}: 'functions' must be a table of [functions.NAME] sections")
    functions = {name: _function(name, entry, source) for name, entry in functions.items()}
    for function in functions.values():
        if function.table is not None and function.table not in tables:
            where = f"{source}: [functions.{function.name}]"
            raise ConfigError(f"{where}: table = {function.table!r} is not a table of [tables]")
    return functions


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
    if not isinstance(defaults, dict) or not set(defaults) <= set(params) - {"uid", "request_headers"}:
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
