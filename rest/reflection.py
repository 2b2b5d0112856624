"""The database's tables as the table API sees them (the prepared plans of plain reads on them are
rest/plans.py's; what the database meant when it refused a statement, rest/refusals.py's). Each
table is reflected once per app, again when a request names what the cache lacks (at most once per
REFRESH_INTERVAL), and after MAX_AGE, so select=* sees new columns; a table reflected again gets
new plans. Which tables are exposed, and who may do what, is tables.toml's (rest/policies.py)."""

import logging
import math
import re
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import NoSuchTableError

from errors import APIError, Rest
from extensions import db, state
from query import resolve, sql, tree
from rest import policies
from row_policies import check_compiles
from variables import ConfigError

log = logging.getLogger("minibase")

REFRESH_INTERVAL = 5.0  # seconds between two reflections of one table
MAX_AGE = 60.0  # seconds after which a table is reflected again anyway, so select=* sees new columns


def schema():
    """The reflected tables and the read plans (extensions.Schema) of this app."""
    return state().schema


def dialect():
    return db.engine.dialect.name


def reflected(name, columns=(), force=False):
    """The table `name` as the database has it, from the cache. Reflected again when it lacks one
    of `columns` or is missing (at most once per REFRESH_INTERVAL), after MAX_AGE, or when forced."""
    cache = schema()
    found = cache.tables.get(name)
    age = time.monotonic() - cache.checked.get(name, -math.inf)
    if found is not None and not force and age < MAX_AGE and all(column in found.c for column in columns):
        return found
    with cache.lock:
        found = cache.tables.get(name)
        age = time.monotonic() - cache.checked.get(name, -math.inf)
        lacking = found is None or not all(column in found.c for column in columns)
        if force or age >= MAX_AGE or (age >= REFRESH_INTERVAL and lacking):
            found = _reflect(name)  # a database that does not answer raises: nothing is recorded
            cache.tables[name], cache.checked[name] = found, time.monotonic()
    if found is None:
        raise policies.table_not_found(name)
    return found


def reflected_or_none(name, columns=()):
    """The table `name` as `reflected` finds it, or None when the database lacks it."""
    try:
        return reflected(name, columns)
    except APIError:
        return None


@dataclass(frozen=True)
class Reference:
    """A foreign key: `columns` of this table hold the `target_columns` of table `target`. Declared
    in the database (`name` is its constraint's, when it has one) or in tables.toml's references."""

    name: str | None
    columns: tuple
    target: str
    target_columns: tuple


def references(table):
    """The table's (or an alias's table's) foreign keys through exposed columns, found when it was
    reflected."""
    return getattr(table, "element", table).info.get("references", ())


def _reflect(name):
    """The table as the API sees it: only its exposed columns (tables.toml's `columns`), a view's
    configured primary key, its foreign keys, and whether it is a view (read-only)."""
    try:
        table = sa.Table(name, sa.MetaData(), autoload_with=db.engine, resolve_fks=False)
        unique_sets = _unique_sets(table)
    except NoSuchTableError:
        return None
    for column in _json_text_columns(table):
        column.type = sa.JSON()  # read and written as JSON, as on MySQL and SQLite
    for column in table.c:
        if isinstance(column.type, sa.Float) and column.type.asdecimal:
            # MySQL's DOUBLE and FLOAT reflect as Decimals kept to 10 places (1.25e-12 read as 0):
            # a float column's value is read as the float it is.
            column.type.asdecimal = False
    policy = policies.policies().get(name)
    found = [_reference(constraint) for constraint in table.foreign_key_constraints]
    if policy is not None:
        found += [Reference(None, (column,), target, (key,)) for column, target, key in policy.references]
    if policy is not None and (policy.columns or policy.primary_key):
        table = _exposed(table, policy)
    table.info["unique_sets"] = [s for s in unique_sets if s <= set(table.c.keys())]
    table.info["view"] = name in sa.inspect(db.engine).get_view_names()
    table.info["references"] = tuple(r for r in found if all(c in table.c for c in r.columns))
    return table


MARIADB_JSON = re.compile(r"json_valid\(`?(\w+)`?\)", re.IGNORECASE)


def _json_text_columns(table):
    """MariaDB's JSON columns: LONGTEXT that a CHECK (json_valid(col)) keeps valid, which is what
    MariaDB makes of `col JSON`. They reflect as text (the check is the column's own, which the
    dialect does not reflect), and would answer a JSON document as a string."""
    if dialect() != "mysql" or not any(isinstance(column.type, sa.String) for column in table.c):
        return []
    query = sa.text(
        "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
        "WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = :name"
    )
    try:
        with db.engine.connect() as connection:
            clauses = connection.execute(query, {"name": table.name}).scalars().all()
    except sa.exc.ProgrammingError:  # a MySQL without the view: its JSON columns reflect as JSON
        return []
    named = {found.group(1) for clause in clauses if (found := MARIADB_JSON.fullmatch(clause.strip()))}
    return [column for column in table.c if column.key in named and isinstance(column.type, sa.String)]


def _reference(constraint):
    targets = [element.target_fullname.rsplit(".", 2)[-2:] for element in constraint.elements]
    return Reference(
        constraint.name,
        tuple(constraint.column_keys),
        targets[0][0],
        tuple(column for _, column in targets),
    )


def _exposed(table, policy):
    """A copy of `table` with only the columns `policy` exposes, `policy.primary_key` as its key."""
    keep = [column for column in table.c if policy.columns is None or column.key in policy.columns]
    copies = []
    for column in keep:
        copy = column._copy()
        if policy.primary_key:
            copy.primary_key = column.key == policy.primary_key
        copies.append(copy)
    return sa.Table(table.name, sa.MetaData(), *copies)


def _unique_sets(table):
    """The column sets that identify a row: the primary key, unique constraints and unique indexes
    without a WHERE clause. On SQLite the indexes behind UNIQUE constraints are asked for too:
    SQLAlchemy misses a column's own UNIQUE when its type has a length (`name VARCHAR(50) UNIQUE`)."""
    sets = [frozenset(c.key for c in primary_key(table))]
    sets += [
        frozenset(c.key for c in constraint.columns)
        for constraint in table.constraints
        if isinstance(constraint, sa.UniqueConstraint)
    ]
    if dialect() == "sqlite":
        found = sa.inspect(db.engine).get_indexes(table.name, include_auto_indexes=True)
        indexes = [
            index["column_names"]
            for index in found
            if index["unique"] and index["dialect_options"].get("sqlite_where") is None
        ]
    else:
        indexes = [[c.key for c in index.columns] for index in table.indexes if index.unique]
    sets += [frozenset(names) for names in indexes if names and None not in names]
    return list({s: None for s in sets if s})


def check_row_policies():
    """Each row policy of tables.toml, compiled and run by the database on its table (LIMIT 0, its
    parameters NULL): a ConfigError naming the table and the operation when one does not compile (a
    typo, an unknown column), or when a policy checks the writes of a table without a primary key
    (the rows written are checked by key)."""
    for name, policy in policies.policies().items():
        if not policy.row_policies:
            continue
        table = reflected_or_none(name)
        where = f"tables.toml: [tables.{name}.policies]"
        if table is None:
            raise ConfigError(f"{where}: the database has no table {name!r}")
        for operation, row_policy in policy.row_policies.items():
            if operation in ("insert", "update", "update_check") and not primary_key(table):
                raise ConfigError(f"{where}: {operation} needs the table to have a primary key")
            statement = sa.select(sa.literal(1)).select_from(table).where(row_policy.clause(table, {}))
            check_compiles(statement, where, operation)


def primary_key(table):
    """The primary key's columns: none for a subquery (a function's result)."""
    key = table.primary_key
    return list(getattr(key, "columns", key))


def unique_sets(table):
    """The column sets an upsert may name in on_conflict (that identify a row), found when the table
    was reflected."""
    return getattr(table, "element", table).info["unique_sets"]


def generated(table, column):
    """Whether the database fills a primary key column left out of an insert."""
    return (
        column is table.autoincrement_column
        or column.default is not None
        or column.server_default is not None
        or column.nullable
    )


def require_columns(table, names, where):
    """A 400 naming the first of `names` the table lacks: in a body or `columns`, PostgREST's own
    PGRST204; elsewhere (on_conflict) PostgreSQL's 42703."""
    for name in names:
        if name not in table.c:
            if where in ("body", "columns"):
                raise APIError(
                    400,
                    Rest.COLUMN_NOT_FOUND,
                    f"Could not find the '{name[:100]}' column of '{table.name}' in the schema cache",
                )
            unknown = resolve.unknown_column(table, name)
            raise APIError(400, Rest.UNDEFINED_COLUMN, str(unknown), hint=unknown.hint)


def check_conflict_target(table, columns):
    """A 400 unless `columns` are the primary key or the columns of one unique constraint or index."""
    require_columns(table, columns, "on_conflict")
    if frozenset(columns) not in unique_sets(table):
        raise APIError(
            400,
            Rest.NO_CONFLICT_TARGET,
            "there is no unique or primary key constraint matching the on_conflict columns",
            hint="on_conflict must name the primary key or the columns of one unique constraint",
        )


def ordering(order, table, not_null=frozenset()):
    """The order= text's clauses, then the primary key, so that equal rows keep a stable order.
    `not_null`: the columns the rows ordered hold no NULL in (sql.order_clauses)."""
    return sql.order_clauses(order_items(order, table), table, dialect(), not_null)


def order_items(order, table):
    """The order= text's items, then the primary key's columns it does not name."""
    items = resolve.parse_order(order, table)
    named = {item.column for item in items}
    return items + [tree.OrderItem(c.key) for c in primary_key(table) if c.key not in named]
