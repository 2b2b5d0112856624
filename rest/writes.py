"""The SQL the table API writes with: inserts, upserts, updates and deletes, without RETURNING
(written rows are read back by key, rest/reads.py), each inside the caller's transaction."""

from dataclasses import dataclass

import sqlalchemy as sa

from database import statements
from encoding import json_rows, json_value, row_shape
from extensions import db, state
from query import resolve, tree
from rest import policies
from rest.plans import MAX_PLANS
from rest.reads import also, chunks, fetch, filtered, plain_rows, select_rows
from rest.reflection import dialect, primary_key


@dataclass(frozen=True)
class Upsert:
    columns: list  # the on_conflict columns
    merge: bool  # merge-duplicates, else ignore-duplicates
    guard: object = None  # the update Grant an existing row must pass to be merged
    defaulted: tuple = ()  # ?columns= under missing=default: a key a row leaves out merges its default


SKIPPED = object()  # an upsert's row left alone (ignore-duplicates)


def insert(table, rows, upsert=None, want_keys=False, last=False):
    """Insert the rows (converted values) in one transaction. Returns the primary keys of the rows
    stored (inserted or merged) in order, when `want_keys`, how many rows were stored, and how
    many of them were inserted rather than merged into an existing row. `last`: the unit of work
    sends nothing after these rows (one row is then its own transaction where it can be)."""
    same_keys = len({frozenset(row) for row in rows}) == 1
    if not want_keys and upsert is None and same_keys and len(rows) > 1 and rows[0]:
        db.session.execute(sa.insert(table), rows)
        return [], len(rows), len(rows)
    keys = []
    stored = inserted = 0
    if upsert is not None:
        lock_for_writing(table)
    for row in rows:
        key, new = (
            _upsert_row(table, row, upsert)
            if upsert is not None
            else (_insert_row(table, row, alone=last and len(rows) == 1), True)
        )
        if key is SKIPPED:
            continue
        stored += 1
        inserted += new
        if key is not None:
            keys.append(key)
    return keys, stored, inserted


def _insert_row(table, row, alone=False):
    """The row inserted; its primary key, as SQLAlchemy's inserted_primary_key gives it: the values
    the row gives, the autoincrement column's from the cursor's lastrowid."""
    plan = _insert_plan(table, tuple(row)) if row else None
    if plan is None:
        result = db.session.execute(sa.insert(table).values(row) if row else sa.insert(table), {})
        return tuple(result.inserted_primary_key or ()) or None
    rowid = statements.execute(
        plan.statement, {f"v{n}": row[name] for n, name in enumerate(plan.names)}, alone=alone
    )
    if rowid is not None and plan.rowid is not None:
        rowid = plan.rowid(rowid)
    given = rowid is None or plan.autoincrement is None
    key = [row.get(c.key) if given or c is not plan.autoincrement else rowid for c in primary_key(table)]
    return tuple(key) or None


@dataclass(frozen=True)
class InsertPlan:
    statement: statements.Prepared
    names: tuple  # the columns the row sets, in the order of the statement's parameters v0, v1, ...
    autoincrement: sa.Column | None  # the column lastrowid fills, when the row leaves it out
    rowid: object  # lastrowid's result processor, or None


NOT_PLANNED = object()


def _insert_plan(table, names):
    """The INSERT of a row that sets the columns `names`, compiled once and kept with the read plans
    (a table reflected again gets new ones), or None when SQLAlchemy must run it: a column it would
    fill from a default of its own, or a primary key it would read back with RETURNING."""
    cache = state().schema
    key = ("insert", table, names)
    found = cache.plans.get(key, NOT_PLANNED)
    if found is NOT_PLANNED:
        found = _plan_insert(table, names)
        with cache.lock:
            cache.plans[key] = found
            while len(cache.plans) > MAX_PLANS:
                cache.plans.popitem(last=False)
    return found


def _plan_insert(table, names):
    autoincrement = table.autoincrement_column
    left_out = [column for column in table.c if column.key not in names]
    if any(column.default is not None for column in left_out) or any(
        column.key not in names and column is not autoincrement for column in primary_key(table)
    ):
        return None
    columns = [table.c[name] for name in names]
    bound = {column: sa.bindparam(f"v{n}", type_=column.type) for n, column in enumerate(columns)}
    statement = statements.prepare(sa.insert(table).values(bound), db.engine, named=False)
    if statement is None:
        return None
    dialect = db.engine.dialect
    rowid = (
        None
        if autoincrement is None
        else autoincrement.type.dialect_impl(dialect).result_processor(dialect, None)
    )
    return InsertPlan(statement, names, autoincrement, rowid)


def lock_for_writing(table):
    """SQLite: take the write lock before the reads that decide the writes, as BEGIN IMMEDIATE does,
    so that a concurrent writer waits instead of slipping in between (MySQL locks with FOR UPDATE)."""
    if dialect() == "sqlite":
        column = next(iter(table.c))
        db.session.execute(sa.update(table).where(sa.false()).values({column.key: column}))


def _upsert_row(table, row, upsert):
    """(the row's primary key, or SKIPPED, and whether it was inserted)."""
    if any(row.get(column) is None for column in upsert.columns):
        return _insert_row(table, row), True
    match = sa.and_(*(table.c[column] == row[column] for column in upsert.columns))
    existing = _conflicting(table, match, upsert.guard)
    if existing is None:
        try:
            return _insert_savepoint(table, row), True
        except sa.exc.IntegrityError:
            existing = _conflicting(table, match, upsert.guard)  # a concurrent insert came first
            if existing is None:
                raise
    if not upsert.merge:
        return SKIPPED, False
    if not existing.allowed:
        if upsert.guard.using is not None:  # a row the caller may not touch, perhaps not even see
            raise policies.violation(table.name)
        raise policies.denied("permission denied: the conflicting row belongs to another user")
    changes = {key: value for key, value in row.items() if key not in upsert.columns}
    keys = {column.key for column in primary_key(table)}
    for name in upsert.defaulted:  # PostgREST's `SET col = EXCLUDED.col`: the default, not the old value
        if name not in row and name not in upsert.columns and name not in keys:
            changes[name] = column_default(table.c[name])
    if changes:
        db.session.execute(sa.update(table).where(match).values(changes))
    key = tuple(existing)[:-1]
    moved = tuple(changes.get(c.key, old) for c, old in zip(primary_key(table), key, strict=True))
    return moved or None, False


def column_default(column):
    """What DEFAULT gives `column`, for an UPDATE (SQLite takes no DEFAULT there): its server
    default's SQL, or NULL."""
    default = getattr(column.server_default, "arg", None)
    if default is None:
        return None
    return sa.literal_column(f"({getattr(default, 'text', default)})")


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


def locked_keys(table, where):
    columns = primary_key(table)
    statement = filtered(sa.select(*columns), where).order_by(*columns).with_for_update()
    return [tuple(row) for row in db.session.execute(statement)]


def update(table, values, where, items=None, read=None, grant=None):
    """UPDATE the rows `where` selects. Returns, with `items`, the changed rows as they are now
    (else []), and how many rows the filters matched. `read`, a function of primary keys that
    returns rows, reads them back instead of `items` (a table with a primary key only); with
    `items`, a changed row the reader's `grant` no longer admits is left out, as the embedded
    reader leaves it out."""
    statement = sa.update(table).values(values)
    if items is None and read is None:
        return [], db.session.execute(filtered(statement, where)).rowcount
    columns = primary_key(table)
    if not columns:
        if not all(item.plain for item in items or ()):
            raise tree.FilterError("JSON paths and casts in select need a table with a primary key here")
        lock_for_writing(table)
        before = select_rows(table, resolve.parse_select(None, table), where, lock=True)
        db.session.execute(filtered(statement, where))
        changed = [{**row, **{k: json_value(table.c[k], v) for k, v in values.items()}} for row in before]
        return [{item.alias: row[item.column] for item in items} for row in changed], len(before)
    lock_for_writing(table)
    keys = locked_keys(table, where)
    for chunk in chunks(columns, keys):
        db.session.execute(statement.where(sa.and_(chunk, *also(where))))
    moved = [tuple(values.get(c.key, old) for c, old in zip(columns, key, strict=True)) for key in keys]
    return (read(moved) if read is not None else fetch(table, items, moved, grant)), len(keys)


def delete(table, where, items=None, read=None):
    """DELETE the rows `where` selects. Returns, with `items`, the deleted rows as they were (else
    []), and how many rows were deleted. `read`, a function of primary keys that returns rows,
    reads them before they go instead of `items` (a table with a primary key only)."""
    key_columns = primary_key(table)
    if items is None and read is None:
        return [], db.session.execute(filtered(sa.delete(table), where)).rowcount
    lock_for_writing(table)
    if read is not None:
        keys = locked_keys(table, where)
        before = read(keys)
        _delete_keys(table, where, keys)
        return before, len(keys)
    if not key_columns:
        before = select_rows(table, items, where, lock=True)
        db.session.execute(filtered(sa.delete(table), where))
        return before, len(before)
    columns = [*(resolve.output(item, table) for item in items), *key_columns]
    before = plain_rows(table, columns, where, order=key_columns, lock=True)
    _delete_keys(table, where, [row[len(items) :] for row in before])
    return json_rows(row_shape(table, items), before), len(before)


def _delete_keys(table, where, keys):
    for chunk in chunks(primary_key(table), keys):
        db.session.execute(sa.delete(table).where(sa.and_(chunk, *also(where))))
