"""The exposed tables: reflected once per app, refreshed when a request names what the cache lacks,
and the reads and writes /rest/v1 does on them (SPEC §4). No RETURNING: rows are read back by key."""

import difflib
import logging
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as time_of_day
from decimal import Decimal

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import DBAPIError, NoSuchTableError

import filters
from errors import APIError
from extensions import db, state

log = logging.getLogger("minibase")

REFRESH_INTERVAL = 5.0  # seconds between two reflections of one table
MAX_AGE = 60.0  # seconds after which a table is reflected again anyway, so select=* sees new columns
KEY_CHUNK = 500  # primary keys per IN (...) list; SQLite allows 32766 bound parameters
MAX_INTEGER = 2**63
ATTEMPTS = 3  # of a request's transaction: a stale cache or a deadlock is worth another try
DEADLOCK_CODES = (1213,)  # MySQL chose this transaction as a deadlock victim and rolled it back


# --- reflection


def schema():
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
            cache.checked[name] = time.monotonic()
            found = _reflect(name)
            cache.tables[name] = found
    if found is None:
        raise APIError(404, "table_not_found", f"Could not find the table '{name}'")
    return found


def _reflect(name):
    try:
        return sa.Table(name, sa.MetaData(), autoload_with=db.engine, resolve_fks=False)
    except NoSuchTableError:
        return None


def primary_key(table):
    return list(table.primary_key.columns)


def unique_sets(table):
    """The column sets that identify a row: the primary key, unique constraints and unique indexes."""
    sets = [frozenset(c.key for c in primary_key(table))]
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint):
            sets.append(frozenset(c.key for c in constraint.columns))
    sets.extend(frozenset(c.key for c in index.columns) for index in table.indexes if index.unique)
    return [s for s in sets if s]


def suggest(name, table):
    matches = difflib.get_close_matches(name, list(table.c.keys()), n=1) if len(name) <= 100 else []
    return f'did you mean "{matches[0]}"?' if matches else None


def require_columns(table, names, where):
    """A 400 naming the first of `names` the table lacks."""
    for name in names:
        if name not in table.c:
            raise APIError(
                400,
                "column_not_found",
                f'unknown column "{name[:60]}" in {where}',
                hint=suggest(name, table),
            )


# --- running a request's work


def run(name, columns, work, write=False):
    """`work(table)` on the reflected table, committed when `write`. A schema that changed under
    the cache (a column or table dropped) is reflected again and the work tried once more, as is a
    transaction MySQL chose as a deadlock victim; database errors a client caused become 4xx
    without the database's text."""
    force = False
    for attempt in range(1, ATTEMPTS + 1):
        table = reflected(name, columns, force=force)
        try:
            result = work(table)
            if write:
                db.session.commit()
            return result
        except filters.FilterError as exc:
            db.session.rollback()
            raise APIError(400, "bad_request", str(exc), hint=exc.hint) from None
        except DBAPIError as exc:
            db.session.rollback()
            force = schema_changed(exc) and not force
            if attempt < ATTEMPTS and (force or _mysql_code(exc) in DEADLOCK_CODES):
                log.info("table %s: %s, trying again", name, type(exc.orig).__name__)
                continue
            error = database_error(exc, table)
            if error is None:
                raise
            raise error from None
        except BaseException:
            db.session.rollback()
            raise


def _mysql_code(exc):
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def schema_changed(exc):
    if dialect() == "sqlite":
        text = str(exc.orig)
        return text.startswith(("no such column", "no such table")) or "has no column named" in text
    return _mysql_code(exc) in (1054, 1146)


MYSQL_COLUMN = re.compile(r"(?:[Cc]olumn|[Ff]ield) [`']?(?:[^`'.]+[`']?\.[`']?)*([^`'.]+)[`']?")
SQLITE_COLUMN = re.compile(r"constraint failed: [^.,\s]+\.([^,\s]+)")


def database_error(exc, table):
    """The 4xx for a constraint or value the database refused, or None when it is not the client's."""
    if dialect() == "sqlite":
        text = str(exc.orig)
        found = SQLITE_COLUMN.search(text)
        kind = {
            "UNIQUE constraint failed": "unique",
            "PRIMARY KEY must be unique": "unique",
            "FOREIGN KEY constraint failed": "foreign_key",
            "NOT NULL constraint failed": "not_null",
            "CHECK constraint failed": "check",
            "datatype mismatch": "invalid",
        }
        kind = next((v for k, v in kind.items() if text.startswith(k)), None)
    else:
        text = str(getattr(exc.orig, "args", ("", ""))[-1])
        found = MYSQL_COLUMN.search(text)
        kind = {
            1062: "unique",
            1451: "referenced",
            1217: "referenced",
            1452: "foreign_key",
            1216: "foreign_key",
            1048: "not_null",
            1364: "not_null",
            3819: "check",
            4025: "check",
            1406: "too_long",
            1264: "out_of_range",
            1366: "invalid",
            1292: "invalid",
            1265: "invalid",
        }.get(_mysql_code(exc))
    if kind is None:
        if isinstance(exc, sa.exc.IntegrityError):
            kind = "constraint"
        elif isinstance(exc, sa.exc.DataError):
            kind = "invalid"
        else:
            return None
    column = found.group(1) if found and found.group(1) in table.c else None
    return _constraint_error(kind, table.name, column)


def _constraint_error(kind, table, column):
    named = f' in column "{column}"' if column else ""
    messages = {
        "unique": (409, "duplicate key value violates unique constraint"),
        "foreign_key": (409, f'foreign key violation: a value in table "{table}" refers to a missing row'),
        "referenced": (409, f'foreign key violation: other rows still refer to this row of table "{table}"'),
        "constraint": (409, f'the row violates a constraint of table "{table}"'),
        "not_null": (400, f"null value{named} violates not-null constraint"),
        "check": (400, f'new row for table "{table}" violates check constraint'),
        "too_long": (400, f"value too long{named}"),
        "out_of_range": (400, f"value out of range{named}"),
        "invalid": (400, f"invalid value{named}"),
    }
    status, message = messages[kind]
    return APIError(status, kind if status == 400 else "conflict", message)


# --- values in and out


def python_type(column):
    try:
        return column.type.python_type
    except NotImplementedError:
        return None


def is_mysql_boolean(column):
    # MySQL has no BOOLEAN: BOOL is TINYINT(1), which connectors read as a boolean.
    return isinstance(column.type, mysql.TINYINT) and column.type.display_width == 1


def body_value(column, value):
    """A JSON body value converted to the column's type; a 400 naming the column when it does not fit."""
    converted = _converted(column, value)
    length = getattr(column.type, "length", None)
    if (
        isinstance(converted, str)
        and isinstance(column.type, sa.String)
        and length
        and len(converted) > length
    ):
        raise filters.FilterError(f'value too long for column "{column.key}" (at most {length} characters)')
    if is_mysql_boolean(column) and converted not in (None, 0, 1):
        raise filters.FilterError(f'column "{column.key}" takes true or false')
    return converted


def _converted(column, value):
    if value is None or isinstance(column.type, sa.JSON):
        return value
    kind = python_type(column)
    if isinstance(value, str):
        return filters.convert_value(column, value)
    if isinstance(value, dict | list):
        raise _invalid(column, value)
    if isinstance(value, bool):
        if kind is bool or kind is None:
            return value
        if is_mysql_boolean(column):
            return int(value)
        raise _invalid(column, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _invalid(column, value)
    if kind is None:
        return value
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise _invalid(column, value)
        if not -MAX_INTEGER <= int(value) < MAX_INTEGER:
            raise _invalid(column, value)
        return int(value)
    if kind is float:
        return float(value)
    if kind is Decimal:
        return Decimal(str(value))
    if kind is bool and value in (0, 1):
        return bool(value)
    if kind is str:
        return filters.convert_value(column, str(value))
    raise _invalid(column, value)


def _invalid(column, value):
    kind = {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}.get(
        type(value), "a number"
    )
    label = type(column.type).__name__.lower()
    return filters.FilterError(f'column "{column.key}" ({label}) cannot take {kind}')


def row_values(table, row, where="body"):
    """A body object's values, converted; a 400 naming an unknown column."""
    require_columns(table, row, where)
    return {key: body_value(table.c[key], value) for key, value in row.items()}


def json_value(column, value):
    """A database value as JSON: ISO dates, numbers as numbers, MySQL's TINYINT(1) as a boolean."""
    if value is None or isinstance(value, str | bool | dict | list):
        return value
    if isinstance(value, int):
        return bool(value) if is_mysql_boolean(column) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    if isinstance(value, Decimal):
        number = float(value)
        if not math.isfinite(number):
            return str(value)
        return int(value) if value.as_tuple().exponent >= 0 and abs(value) < MAX_INTEGER else number
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)


def text_value(value):
    """A JSON-ready value as one CSV field; NULL is an empty field."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return current_app.json.dumps(value)
    return str(value)


# --- reading


@dataclass(frozen=True)
class Query:
    """What a request asks of a table before the table is known: filter nodes and raw select/order."""

    filters: list
    select: str | None = None
    order: str | None = None

    def columns(self):
        """The names the request uses: if the cache lacks one, the table is reflected again."""
        names = set()
        pending = list(self.filters)
        while pending:
            node = pending.pop()
            if isinstance(node, filters.Logic):
                pending.extend(node.children)
            else:
                names.add(node.column)
        for part in (self.select or "").split(","):
            name = part.rpartition(":")[2].strip()
            if name and name != "*":
                names.add(name)
        for part in (self.order or "").split(","):
            names.add(part.split(".")[0].strip())
        names.discard("")
        return names


@dataclass(frozen=True)
class Page:
    """Rows to answer with, their aliases (a CSV header when there are no rows), the total when
    counted, and the primary keys of the rows written."""

    rows: list
    names: list
    total: int | None = None
    keys: list = field(default_factory=list)


def condition(query, table, *grants):
    """The WHERE clause: the request's filters AND the grants' owner conditions."""
    parts = [filters.where_clause(query.filters, table, dialect())]
    parts += [grant.condition(table) for grant in grants if grant is not None]
    parts = [part for part in parts if part is not None]
    return sa.and_(*parts) if parts else None


def ordering(query, table):
    """The request's order, then the primary key, so that equal rows keep a stable order."""
    items = filters.parse_order(query.order, table)
    named = {item.column for item in items}
    items += [filters.OrderItem(c.key) for c in primary_key(table) if c.key not in named]
    return filters.order_clauses(items, table, dialect())


def _where(statement, where):
    return statement if where is None else statement.where(where)


def _rows(table, columns, where, order=(), offset=0, limit=None, lock=False):
    labeled = [column.label(f"c{index}") for index, column in enumerate(columns)]
    statement = _where(sa.select(*labeled), where).order_by(*order)
    if offset:
        statement = statement.offset(offset)
    if limit is not None:
        statement = statement.limit(limit)
    if lock:
        statement = statement.with_for_update()
    return [tuple(row) for row in db.session.execute(statement)]


def present(table, items, values):
    """One row as a dict keyed by alias, in JSON-ready values."""
    return {
        item.alias: json_value(table.c[item.column], value)
        for item, value in zip(items, values, strict=False)
    }


def select_rows(table, items, where, order=(), offset=0, limit=None, lock=False):
    """Rows as dicts keyed by alias, in JSON-ready values."""
    columns = [table.c[item.column] for item in items]
    return [present(table, items, row) for row in _rows(table, columns, where, order, offset, limit, lock)]


def read(table, request, grant):
    """One page of the rows the request and the grant select, and their total when it is asked for."""
    items = filters.parse_select(request.query.select, table)
    where = condition(request.query, table, grant)
    order = ordering(request.query, table)
    rows = (
        [] if request.limit == 0 else select_rows(table, items, where, order, request.offset, request.limit)
    )
    total = None
    if request.count:
        total = db.session.execute(_where(sa.select(sa.func.count()).select_from(table), where)).scalar()
    return Page(rows, [item.alias for item in items], total)


def _key_condition(columns, keys):
    if len(columns) == 1:
        return columns[0].in_([key[0] for key in keys])
    return sa.tuple_(*columns).in_(keys)


def fetch(table, items, keys, grant=None):
    """The rows with primary keys `keys`, in that order (rows the reader may not see are left out)."""
    key_columns = primary_key(table)
    columns = [*(table.c[item.column] for item in items), *key_columns]
    found = {}
    for start in range(0, len(keys), KEY_CHUNK):
        where = sa.and_(
            _key_condition(key_columns, keys[start : start + KEY_CHUNK]),
            *_present(grant and grant.condition(table)),
        )
        for row in _rows(table, columns, where):
            found[row[len(items) :]] = present(table, items, row)
    return [found[key] for key in keys if key in found]


def fetch_inserted(table, items, rows, grant=None):
    """Rows just inserted into a table without a primary key, found by the values sent."""
    found = []
    for row in rows:
        match = [
            table.c[key].is_(None) if value is None else table.c[key] == value for key, value in row.items()
        ]
        where = sa.and_(sa.true(), *match, *_present(grant and grant.condition(table)))
        found.extend(select_rows(table, items, where, limit=1))
    return found


def _present(clause):
    return [] if clause is None else [clause]


# --- writing


@dataclass(frozen=True)
class Upsert:
    columns: list  # the on_conflict columns
    merge: bool  # merge-duplicates, else ignore-duplicates
    guard: object = None  # the update Grant an existing row must pass to be merged


def check_conflict_target(table, columns):
    require_columns(table, columns, "on_conflict")
    if frozenset(columns) not in unique_sets(table):
        raise APIError(
            400,
            "bad_on_conflict",
            "there is no unique or primary key constraint matching the on_conflict columns",
            hint="on_conflict must name the primary key or the columns of one unique constraint",
        )


def insert(table, rows, upsert=None, want_keys=False):
    """Insert the rows (converted values) in one transaction; returns the primary keys of the rows
    stored (inserted or merged) in order, when `want_keys`."""
    for row in rows:
        for column in primary_key(table):
            if column.key not in row and not _generated(table, column):
                raise _constraint_error("not_null", table.name, column.key)
    same_keys = len({frozenset(row) for row in rows}) == 1
    if not want_keys and upsert is None and same_keys and len(rows) > 1 and rows[0]:
        db.session.execute(sa.insert(table), rows)
        return []
    keys = []
    if upsert is not None:
        lock_for_writing(table)
    for row in rows:
        key = _upsert_row(table, row, upsert) if upsert is not None else _insert_row(table, row)
        if key is not None:
            keys.append(key)
    return keys


def _generated(table, column):
    """Whether the database fills a primary key column left out of an insert."""
    return (
        column is table.autoincrement_column
        or column.default is not None
        or column.server_default is not None
        or column.nullable
    )


def _insert_row(table, row):
    result = db.session.execute(sa.insert(table).values(row) if row else sa.insert(table), {})
    return tuple(result.inserted_primary_key or ()) or None


def lock_for_writing(table):
    """SQLite: take the write lock before the reads that decide the writes, as BEGIN IMMEDIATE does,
    so that a concurrent writer waits instead of slipping in between (MySQL locks with FOR UPDATE)."""
    if dialect() == "sqlite":
        column = next(iter(table.c))
        db.session.execute(sa.update(table).where(sa.false()).values({column.key: column}))


def _upsert_row(table, row, upsert):
    if any(row.get(column) is None for column in upsert.columns):
        return _insert_row(table, row)
    match = sa.and_(*(table.c[column] == row[column] for column in upsert.columns))
    existing = _conflicting(table, match, upsert.guard)
    if existing is None:
        try:
            return _insert_savepoint(table, row)
        except sa.exc.IntegrityError:
            existing = _conflicting(table, match, upsert.guard)  # a concurrent insert came first
            if existing is None:
                raise
    if not upsert.merge:
        return None
    if not existing.allowed:
        raise APIError(
            403, "permission_denied", "permission denied: the conflicting row belongs to another user"
        )
    changes = {key: value for key, value in row.items() if key not in upsert.columns}
    if changes:
        db.session.execute(sa.update(table).where(match).values(changes))
    key = tuple(existing)[:-1]
    return tuple(changes.get(c.key, old) for c, old in zip(primary_key(table), key, strict=True)) or None


def _conflicting(table, match, guard):
    """The primary key of the row an upsert meets, locked, and whether `guard` lets it be merged."""
    allowed = guard.condition(table) if guard is not None else None
    flag = sa.true() if allowed is None else sa.case((allowed, True), else_=False)
    statement = sa.select(*primary_key(table), flag.label("allowed")).where(match).with_for_update()
    return db.session.execute(statement).first()


def _insert_savepoint(table, row):
    # MySQL: FOR UPDATE finds no row to lock, so two upserts of one new key can race to insert.
    if dialect() != "mysql":
        return _insert_row(table, row)
    with db.session.begin_nested():
        return _insert_row(table, row)


def _locked_keys(table, where):
    columns = primary_key(table)
    statement = _where(sa.select(*columns), where).order_by(*columns).with_for_update()
    return [tuple(row) for row in db.session.execute(statement)]


def update(table, values, where, items=None):
    """UPDATE the rows `where` selects; with `items`, the changed rows as they are now."""
    statement = sa.update(table).values(values)
    if items is None:
        db.session.execute(_where(statement, where))
        return []
    columns = primary_key(table)
    if not columns:
        lock_for_writing(table)
        before = select_rows(table, filters.parse_select(None, table), where, lock=True)
        db.session.execute(_where(statement, where))
        changed = [{**row, **{k: json_value(table.c[k], v) for k, v in values.items()}} for row in before]
        return [{item.alias: row[item.column] for item in items} for row in changed]
    lock_for_writing(table)
    keys = _locked_keys(table, where)
    for start in range(0, len(keys), KEY_CHUNK):
        chunk = _key_condition(columns, keys[start : start + KEY_CHUNK])
        db.session.execute(statement.where(sa.and_(chunk, *_present(where))))
    moved = [tuple(values.get(c.key, old) for c, old in zip(columns, key, strict=True)) for key in keys]
    return fetch(table, items, moved)


def delete(table, where, items=None):
    """DELETE the rows `where` selects; with `items`, the deleted rows as they were."""
    key_columns = primary_key(table)
    if items is None or not key_columns:
        if items is not None:
            lock_for_writing(table)
        before = [] if items is None else select_rows(table, items, where, lock=True)
        db.session.execute(_where(sa.delete(table), where))
        return before
    lock_for_writing(table)
    columns = [*(table.c[item.column] for item in items), *key_columns]
    before = _rows(table, columns, where, order=key_columns, lock=True)
    keys = [row[len(items) :] for row in before]
    for start in range(0, len(keys), KEY_CHUNK):
        chunk = _key_condition(key_columns, keys[start : start + KEY_CHUNK])
        db.session.execute(sa.delete(table).where(sa.and_(chunk, *_present(where))))
    return [present(table, items, row) for row in before]
