"""The access tables.toml gives tables ([tables.NAME], rest.policies) and buckets ([buckets.NAME],
storage.buckets) alike: the four rule words, who may do each operation; and row policies, boolean
SQL expressions over a table's columns that say which rows a caller may read or write, as
PostgreSQL's row-level security does. This module parses both and binds a caller's values."""

import json
import re
from dataclasses import dataclass

import sqlalchemy as sa

from extensions import db
from variables import ConfigError

OPERATIONS = ("select", "insert", "update", "delete")
RULES = ("anon", "authenticated", "owner", "service_role")
KEYS = ("select", "insert", "update", "update_check", "delete")
# The parameters a row policy may use, and the bound parameter each becomes (rls_…, so that none
# meets a filter's p0, p1, … or a plan's owner, limit and offset).
PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_][\w.]*)")
PARAMETERS = ("uid", "role", "email", "aal", "is_anonymous")
ANONYMOUS_EMAIL = "@anonymous.invalid"  # what marks an anonymous user's row (auth/anonymous.py)
APP_METADATA = re.compile(r"app_metadata\.([A-Za-z_]\w*)")


def rule_words(where, entry, operations=OPERATIONS):
    """operation -> rule word of a [tables.NAME], [buckets.NAME] or [realtime]: `service_role` where
    unset."""
    rules = {}
    for operation in operations:
        rule = entry.get(operation, "service_role")
        if rule not in RULES:
            raise ConfigError(f"{where}: {operation} = {rule!r} is not one of {', '.join(RULES)}")
        rules[operation] = rule
    return rules


@dataclass(frozen=True)
class RowPolicy:
    """A policies entry: a boolean SQL expression over the table's columns, its :uid, :role, :email,
    :aal and :app_metadata.KEY turned into bound parameters named rls_…"""

    table: str
    operation: str
    sql: str  # with :rls_… parameters
    params: tuple  # the rls_… names it binds
    written: str = ""  # the SQL as tables.toml says it (the dashboard shows it)

    def clause(self, table, values=None):
        """The expression over `table` (a Table, or an alias of one in an embed), with `values` bound,
        or, without them, parameters that each execution must pass (a prepared plan's)."""
        binds = [
            sa.bindparam(name, required=True) if values is None else sa.bindparam(name, values.get(name))
            for name in self.params
        ]
        expression = sa.text(f"({self.sql})").bindparams(*binds)
        base = getattr(table, "element", None)
        key = list(base.primary_key.columns) if isinstance(base, sa.Table) else []
        if not key:
            return expression
        # An alias: the policy names the table itself (projects.team_id), so it chooses the keys.
        chosen = sa.select(*key).where(expression)
        if len(key) == 1:
            return table.c[key[0].key].in_(chosen)
        return sa.tuple_(*(table.c[column.key] for column in key)).in_(chosen)

    def sql_from(self, callers):
        """The SQL with each parameter read from the column of that name of the derived table named
        `callers` (a row of values per caller), so that one statement judges many callers."""
        return re.sub(r":(rls_\w+)", rf"{callers}.\1", self.sql)


def parse(where, name, entry):
    """A policies section: operation -> RowPolicy. Whether the SQL compiles is the database's to say,
    at start; here, that its parameters are ones we bind."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: policies must be a table of SQL expressions")
    found = {}
    for operation, sql in entry.items():
        if operation not in KEYS:
            raise ConfigError(f"{where}.policies: unknown key {operation!r}; expected {', '.join(KEYS)}")
        if not isinstance(sql, str) or not sql.strip():
            raise ConfigError(f"{where}.policies: {operation} must be an SQL expression")
        params = []

        def bound(match, operation=operation, params=params):
            parameter = match.group(1)
            metadata = APP_METADATA.fullmatch(parameter)
            if parameter in PARAMETERS:
                name = f"rls_{parameter}"
            elif metadata is not None:
                name = f"rls_app_metadata__{metadata.group(1)}"
            else:
                raise ConfigError(
                    f"{where}.policies: {operation} uses :{parameter}; a policy may use :uid, :role, "
                    ":email, :aal, :is_anonymous and :app_metadata.KEY"
                )
            params.append(name)
            return f":{name}"

        text = PARAMETER.sub(bound, sql)
        found[operation] = RowPolicy(name, operation, text, tuple(dict.fromkeys(params)), sql)
    return found


def applying(policies, operation, who):
    """(using, check, values) for `who` doing `operation` under `policies` (operation -> RowPolicy):
    the policy that chooses the rows it reaches, the one the rows it writes must pass (an update's
    is update_check, or its own), and the caller's values for them."""
    using = policies.get(operation) if operation != "insert" else None
    check = policies.get("insert") if operation == "insert" else None
    if operation == "update":
        check = policies.get("update_check", using)
    values = values_for(who) if using is not None or check is not None else {}
    return using, check, values


def values_for(who):
    """The row policies' parameters for a caller: its id, role, email, assurance level, whether it
    is an anonymous user (1 or 0; NULL for an API key) and app_metadata (set by an administrator),
    NULL where it has none. An anonymous user has no email."""
    user = getattr(who, "user", None)
    metadata = (getattr(user, "app_metadata", None) or {}) if user is not None else {}
    email = getattr(user, "email", None)
    anonymous = isinstance(email, str) and email.lower().endswith(ANONYMOUS_EMAIL)
    values = {
        "rls_uid": who.user_id,
        "rls_role": who.role,
        "rls_email": None if anonymous else email,
        "rls_aal": getattr(who, "aal", None),
        "rls_is_anonymous": (1 if anonymous else 0) if user is not None else None,
    }
    for key, value in metadata.items():
        values[f"rls_app_metadata__{key}"] = json.dumps(value) if isinstance(value, dict | list) else value
    return values


def check_compiles(statement, where, operation):
    """Have the database compile and run `statement`, a row policy's query (LIMIT 0, its parameters
    NULL), at start: a ConfigError naming `where` and the operation when it refuses it (a typo, an
    unknown column); the OperationalError itself when the database is down, not the policy wrong."""
    try:
        with db.engine.connect() as connection:
            connection.execute(statement.limit(0)).all()
    except sa.exc.OperationalError as exc:
        if exc.connection_invalidated:
            raise
        raise ConfigError(f"{where}: {operation} does not compile: {_first_line(exc)}") from None
    except sa.exc.DBAPIError as exc:
        raise ConfigError(f"{where}: {operation} does not compile: {_first_line(exc)}") from None


def _first_line(exc):
    """The database's own words for a policy it refused: the operator's SQL, for the operator."""
    return str(exc.orig).splitlines()[0][:300]
