"""The database's tables as SQLAlchemy sees them, and the SQL statements the table API runs on them.

Reflection: each table is reflected once per app and again when a request names what the cache
lacks. Statements: reads, inserts, upserts, updates and deletes, without RETURNING (written rows
are read back by key). This module does not decide who may do what, nor which tables are exposed:
that is tables.toml, which policies.py reads."""

import logging
import math
import re
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import NoSuchTableError

import filters
from database import transactions
from errors import APIError, Rest
from extensions import db, state
from rest import policies
from values import json_rows, json_value, row_shape

log = logging.getLogger("minibase")

REFRESH_INTERVAL = 5.0  # seconds between two reflections of one table
MAX_AGE = 60.0  # seconds after which a table is reflected again anyway, so select=* sees new columns
KEY_CHUNK = 500  # primary keys per IN (...) list; SQLite allows 32766 bound parameters
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
        raise APIError(404, Rest.TABLE_NOT_FOUND, f"Could not find the table '{name}'")
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
    """A 400 naming the first of `names` the table lacks."""
    for name in names:
        if name not in table.c:
            raise APIError(
                400,
                Rest.UNDEFINED_COLUMN,
                f'unknown column "{name[:60]}" in {where}',
                hint=filters.suggest(name, table),
            )


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


# --- what the database said when it refused a statement


def _mysql_code(exc):
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def deadlock(exc):
    return _mysql_code(exc) in DEADLOCK_CODES


def schema_changed(exc):
    """Whether a statement failed because a table or column it names is gone."""
    if dialect() == "sqlite":
        text = str(exc.orig)
        return text.startswith(("no such column", "no such table")) or "has no column named" in text
    return _mysql_code(exc) in (1054, 1146)


MYSQL_COLUMN = re.compile(r"(?:[Cc]olumn|[Ff]ield) [`']?(?:[^`'.]+[`']?\.[`']?)*([^`'.]+)[`']?")
SQLITE_COLUMN = re.compile(r"constraint failed: [^.,\s]+\.([^,\s]+)")
SQLITE_KINDS = {
    "UNIQUE constraint failed": "unique",
    "PRIMARY KEY must be unique": "unique",
    "FOREIGN KEY constraint failed": "foreign_key",
    "NOT NULL constraint failed": "not_null",
    "CHECK constraint failed": "check",
    "datatype mismatch": "invalid",
}
MYSQL_KINDS = {
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
}


@dataclass(frozen=True)
class Refusal:
    """A constraint or value the database refused: `kind` is unique, foreign_key, referenced,
    constraint, not_null, check, too_long, out_of_range or invalid; `column` when it is known."""

    kind: str
    column: str | None = None


def refusal(exc, table, written=()):
    """What the client did wrong, read from a database error; None when it is not the client's.
    `written` names the columns the request sets, which tells SQLite's foreign key errors apart."""
    if dialect() == "sqlite":
        text = str(exc.orig)
        found = SQLITE_COLUMN.search(text)
        kind = next((v for k, v in SQLITE_KINDS.items() if text.startswith(k)), None)
        if kind == "foreign_key":
            kind = _sqlite_foreign_key(exc, table, written)
    else:
        found = MYSQL_COLUMN.search(str(getattr(exc.orig, "args", ("", ""))[-1]))
        kind = MYSQL_KINDS.get(_mysql_code(exc))
    if kind is None:
        if isinstance(exc, sa.exc.IntegrityError):
            kind = "constraint"
        elif isinstance(exc, sa.exc.DataError):
            kind = "invalid"
        else:
            return None
    return Refusal(kind, found.group(1) if found and found.group(1) in table.c else None)


def _sqlite_foreign_key(exc, table, written):
    """SQLite says "FOREIGN KEY constraint failed" both for a row that points nowhere and for a row
    others still point to. A DELETE can only be the second; an INSERT only the first; an UPDATE is
    the first when it sets one of the table's own foreign key columns, else the second."""
    verb = (exc.statement or "").lstrip()[:6].upper()
    if verb == "DELETE":
        return "referenced"
    if verb == "UPDATE" and not {key.parent.key for key in table.foreign_keys} & set(written):
        return "referenced"
    return "foreign_key"


# --- reading


@dataclass(frozen=True)
class Plan:
    """A read's statements, prepared once for every request of its shape: the page's SELECT and the
    count under the same WHERE, with the filters' values, the owner's id and the paging as named
    parameters that each request passes (`read_plan`), and the select items the rows are shaped by.
    `prepared` holds both statements compiled for the DBAPI (database.transactions.prepare), or None when
    their SQL depends on the values (an `in` list): those run through SQLAlchemy."""

    rows: object
    count: object
    items: list
    shape: tuple  # values.row_shape of the items
    prepared: tuple | None = None


MAX_PLANS = 256


def read_plan(table, query, grant, offset, limit):
    """The Plan of a read, from the cache, and this request's parameters for it. A plan is keyed by
    everything that decides its SQL: the table as reflected (so a table reflected again gets new
    plans), the filters' shape, select, order, whether there is an offset and a limit, and the
    grant's rule and whether it keeps an owner to their rows; values, the owner's id included,
    are parameters and never part of the plan."""
    owner = grant.owner_id is not None
    key = (table, filters.shape(query.filters), query.select, query.order, bool(offset), limit is not None,
           grant.policy.rules["select"], owner)  # fmt: skip
    values = filters.parameters(query.filters, table, dialect())
    if owner:
        values["owner"] = grant.owner_id
    if offset:
        values["offset"] = offset
    if limit is not None:
        values["limit"] = limit
    plans = schema().plans
    found = plans.get(key)
    with schema().lock:
        if found is None:
            found = plans[key] = _plan(table, query, grant, offset, limit)
            while len(plans) > MAX_PLANS:
                plans.popitem(last=False)
        elif key in plans:
            plans.move_to_end(key)
    return found, values


def _plan(table, query, grant, offset, limit):
    items = filters.parse_select(query.select, table)
    where = filters.where_clause(query.filters, table, dialect(), named=True)
    where = sa.and_(*_also(where), *_also(grant.condition(table, named=True))) if grant.owner_id else where
    columns = [table.c[item.column].label(f"c{index}") for index, item in enumerate(items)]
    rows = _where(sa.select(*columns), where).order_by(*ordering(query.order, table))
    if offset:
        rows = rows.offset(sa.bindparam("offset", type_=sa.Integer, required=True))
    if limit is not None:
        rows = rows.limit(sa.bindparam("limit", type_=sa.Integer, required=True))
    count = _where(sa.select(sa.func.count()).select_from(table), where)
    compiled = [transactions.prepare(statement, db.engine, named=False) for statement in (rows, count)]
    return Plan(rows, count, items, row_shape(table, items), tuple(compiled) if all(compiled) else None)


def run_plan(plan, values, rows=True, count=False):
    """A plan's page of rows (None when not asked) and its count (None when not asked), in one
    transaction."""
    if plan.prepared is None:
        found = execute(plan.rows, values).all() if rows else None
        return found, execute(plan.count, values).scalar() if count else None
    asked = [statement for statement, wanted in zip(plan.prepared, (rows, count), strict=True) if wanted]
    results = iter(transactions.prepared(values, *asked))
    found = next(results) if rows else None
    return found, next(results)[0][0] if count else None


def condition(nodes, table, *grants):
    """The WHERE clause: the filter nodes AND the grants' owner conditions."""
    parts = [filters.where_clause(nodes, table, dialect())]
    parts += [grant.condition(table) for grant in grants if grant is not None]
    parts = [part for part in parts if part is not None]
    return sa.and_(*parts) if parts else None


def ordering(order, table):
    """The order= text's clauses, then the primary key, so that equal rows keep a stable order."""
    items = filters.parse_order(order, table)
    named = {item.column for item in items}
    items += [filters.OrderItem(c.key) for c in primary_key(table) if c.key not in named]
    return filters.order_clauses(items, table, dialect())


def _where(statement, where):
    return statement if where is None else statement.where(where)


def _also(clause):
    """A clause to AND in, as a list: empty when there is none."""
    return [] if clause is None else [clause]


def _rows(table, columns, where, order=(), offset=0, limit=None, lock=False):
    labeled = [column.label(f"c{index}") for index, column in enumerate(columns)]
    statement = _where(sa.select(*labeled), where).order_by(*order)
    if offset:
        statement = statement.offset(offset)
    if limit is not None:
        statement = statement.limit(limit)
    if lock:
        statement = statement.with_for_update()
    return [tuple(row) for row in execute(statement)]


def execute(statement, parameters=None):
    """Run a Core statement on the session's connection (its transaction), without the ORM's
    per-statement work, which a table API statement never needs."""
    return db.session.connection().execute(statement, parameters)


def select_rows(table, items, where, order=(), offset=0, limit=None, lock=False):
    """Rows as dicts keyed by alias, in JSON values."""
    columns = [table.c[item.column] for item in items]
    return json_rows(row_shape(table, items), _rows(table, columns, where, order, offset, limit, lock))


def count(table, where):
    return execute(_where(sa.select(sa.func.count()).select_from(table), where)).scalar()


def key_condition(columns, keys):
    """`columns` IN `keys` (tuples): one expanding parameter for a single column, not one each."""
    if len(columns) == 1:
        column = columns[0]
        return column.in_(sa.bindparam(None, [key[0] for key in keys], type_=column.type, expanding=True))
    return sa.tuple_(*columns).in_(keys)


def fetch(table, items, keys, grant=None):
    """The rows with primary keys `keys`, in that order (rows the reader may not see are left out)."""
    key_columns = primary_key(table)
    columns = [*(table.c[item.column] for item in items), *key_columns]
    found = {}
    for start in range(0, len(keys), KEY_CHUNK):
        where = sa.and_(
            key_condition(key_columns, keys[start : start + KEY_CHUNK]),
            *_also(grant and grant.condition(table)),
        )
        for row in _rows(table, columns, where):
            found[row[len(items) :]] = row
    return json_rows(row_shape(table, items), [found[key] for key in keys if key in found])


def fetch_inserted(table, items, rows, grant=None):
    """Rows just inserted into a table without a primary key, found by the values sent."""
    found = []
    for row in rows:
        match = [
            table.c[key].is_(None) if value is None else table.c[key] == value for key, value in row.items()
        ]
        where = sa.and_(sa.true(), *match, *_also(grant and grant.condition(table)))
        found.extend(select_rows(table, items, where, limit=1))
    return found


# --- writing


@dataclass(frozen=True)
class Upsert:
    columns: list  # the on_conflict columns
    merge: bool  # merge-duplicates, else ignore-duplicates
    guard: object = None  # the update Grant an existing row must pass to be merged


SKIPPED = object()  # an upsert's row left alone (ignore-duplicates)


def insert(table, rows, upsert=None, want_keys=False):
    """Insert the rows (converted values) in one transaction. Returns the primary keys of the rows
    stored (inserted or merged) in order, when `want_keys`, and how many rows were stored."""
    same_keys = len({frozenset(row) for row in rows}) == 1
    if not want_keys and upsert is None and same_keys and len(rows) > 1 and rows[0]:
        db.session.execute(sa.insert(table), rows)
        return [], len(rows)
    keys = []
    stored = 0
    if upsert is not None:
        lock_for_writing(table)
    for row in rows:
        key = _upsert_row(table, row, upsert) if upsert is not None else _insert_row(table, row)
        if key is SKIPPED:
            continue
        stored += 1
        if key is not None:
            keys.append(key)
    return keys, stored


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
        return SKIPPED
    if not existing.allowed:
        raise policies.denied("permission denied: the conflicting row belongs to another user")
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


def update(table, values, where, items=None, read=None):
    """UPDATE the rows `where` selects. Returns, with `items`, the changed rows as they are now
    (else []), and how many rows the filters matched. `read`, a function of primary keys that
    returns rows, reads them back instead of `items` (a table with a primary key only)."""
    statement = sa.update(table).values(values)
    if items is None and read is None:
        return [], db.session.execute(_where(statement, where)).rowcount
    columns = primary_key(table)
    if not columns:
        lock_for_writing(table)
        before = select_rows(table, filters.parse_select(None, table), where, lock=True)
        db.session.execute(_where(statement, where))
        changed = [{**row, **{k: json_value(table.c[k], v) for k, v in values.items()}} for row in before]
        return [{item.alias: row[item.column] for item in items} for row in changed], len(before)
    lock_for_writing(table)
    keys = _locked_keys(table, where)
    for start in range(0, len(keys), KEY_CHUNK):
        chunk = key_condition(columns, keys[start : start + KEY_CHUNK])
        db.session.execute(statement.where(sa.and_(chunk, *_also(where))))
    moved = [tuple(values.get(c.key, old) for c, old in zip(columns, key, strict=True)) for key in keys]
    return (read(moved) if read is not None else fetch(table, items, moved)), len(keys)


def delete(table, where, items=None, read=None):
    """DELETE the rows `where` selects. Returns, with `items`, the deleted rows as they were (else
    []), and how many rows were deleted. `read`, a function of primary keys that returns rows,
    reads them before they go instead of `items` (a table with a primary key only)."""
    key_columns = primary_key(table)
    if items is None and read is None:
        return [], db.session.execute(_where(sa.delete(table), where)).rowcount
    lock_for_writing(table)
    if read is not None:
        keys = _locked_keys(table, where)
        before = read(keys)
        _delete_keys(table, where, keys)
        return before, len(keys)
    if not key_columns:
        before = select_rows(table, items, where, lock=True)
        db.session.execute(_where(sa.delete(table), where))
        return before, len(before)
    columns = [*(table.c[item.column] for item in items), *key_columns]
    before = _rows(table, columns, where, order=key_columns, lock=True)
    _delete_keys(table, where, [row[len(items) :] for row in before])
    return json_rows(row_shape(table, items), before), len(before)


def _delete_keys(table, where, keys):
    key_columns = primary_key(table)
    for start in range(0, len(keys), KEY_CHUNK):
        chunk = key_condition(key_columns, keys[start : start + KEY_CHUNK])
        db.session.execute(sa.delete(table).where(sa.and_(chunk, *_also(where))))
