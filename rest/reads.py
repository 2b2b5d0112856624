"""The SQL the table API reads with, beside the prepared plans of plain reads (rest/reflection.py):
the WHERE of filters and grants, counts, and rows fetched back by primary key, for embeds,
functions and the rows a write answers with. Values come back as JSON values (encoding.json_rows)."""

import sqlalchemy as sa

from encoding import json_rows, row_shape
from extensions import db
from query import resolve, sql
from rest.reflection import dialect, primary_key

KEY_CHUNK = 500  # primary keys per IN (...) list; SQLite allows 32766 bound parameters


def condition(nodes, table, *grants):
    """The WHERE clause: the filter nodes AND the grants' owner conditions."""
    parts = [sql.where_clause(nodes, table, dialect())]
    parts += [grant.condition(table) for grant in grants if grant is not None]
    parts = [part for part in parts if part is not None]
    return sa.and_(*parts) if parts else None


def filtered(statement, where):
    return statement if where is None else statement.where(where)


def also(clause):
    """A clause to AND in, as a list: empty when there is none."""
    return [] if clause is None else [clause]


def plain_rows(table, columns, where, order=(), offset=0, limit=None, lock=False):
    labeled = [column.label(f"c{index}") for index, column in enumerate(columns)]
    statement = filtered(sa.select(*labeled), where).order_by(*order)
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
    columns = [resolve.output(item, table) for item in items]
    return json_rows(row_shape(table, items), plain_rows(table, columns, where, order, offset, limit, lock))


def count(table, where):
    return execute(filtered(sa.select(sa.func.count()).select_from(table), where)).scalar()


def admitted(table, policy, values, keys):
    """Whether every row whose primary key is in `keys` passes `policy` (a row_policies.RowPolicy) with
    `values`: the check of rows just written, in the writing transaction."""
    failing = sa.case((policy.clause(table, values), 1), else_=0) == 0
    for chunk in chunks(primary_key(table), keys):
        statement = sa.select(sa.func.count()).select_from(table).where(chunk, failing)
        if db.session.execute(statement).scalar():
            return False
    return True


def chunks(columns, keys):
    """`columns` IN each run of at most KEY_CHUNK of `keys`: one condition per statement to run."""
    for start in range(0, len(keys), KEY_CHUNK):
        yield key_condition(columns, keys[start : start + KEY_CHUNK])


def key_condition(columns, keys):
    """`columns` IN `keys` (tuples): one expanding parameter for a single column, not one each."""
    if len(columns) == 1:
        column = columns[0]
        return column.in_(sa.bindparam(None, [key[0] for key in keys], type_=column.type, expanding=True))
    return sa.tuple_(*columns).in_(keys)


def fetch(table, items, keys, grant=None):
    """The rows with primary keys `keys`, in that order (rows the reader may not see are left out)."""
    key_columns = primary_key(table)
    columns = [*(resolve.output(item, table) for item in items), *key_columns]
    found = {}
    for chunk in chunks(key_columns, keys):
        where = sa.and_(chunk, *also(grant and grant.condition(table)))
        for row in plain_rows(table, columns, where):
            found[row[len(items) :]] = row
    return json_rows(row_shape(table, items), [found[key] for key in keys if key in found])


def fetch_inserted(table, items, rows, grant=None):
    """Rows just inserted into a table without a primary key, found by the values sent."""
    found = []
    for row in rows:
        match = [
            table.c[key].is_(None) if value is None else table.c[key] == value for key, value in row.items()
        ]
        where = sa.and_(sa.true(), *match, *also(grant and grant.condition(table)))
        found.extend(select_rows(table, items, where, limit=1))
    return found
