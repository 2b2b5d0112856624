"""What the table API answers when a request cannot be done: a filter or a value it could not read
(a FilterError, a BadValue) and what the database refused (a Refusal, read from its error), each as its
4xx in words of our own (the database's text can carry data), with PostgREST's codes and, for a
duplicate key, PostgreSQL's message and details."""

import json
import re
from dataclasses import dataclass

import sqlalchemy as sa

from database.failures import error_code
from errors import APIError, Rest
from extensions import db
from query import tree
from rest.reflection import dialect, primary_key
from values import BadValue, body_value

MAX_KEY_CHECKS = 100  # written rows looked up to name the one whose key exists


def _duplicate(table, key, written):
    """The values of `key` a written object gives that another one gives too, or that a stored row
    already holds: the key PostgreSQL's detail names. None when no object says."""
    given = [
        tuple(row[column] for column in key)
        for row in written
        if isinstance(row, dict) and all(column in row for column in key)
    ]
    if len(given) == 1:
        return given[0]
    seen = set()
    for values in given:
        if repr(values) in seen:
            return values
        seen.add(repr(values))
    for values in given[:MAX_KEY_CHECKS]:
        try:
            match = [table.c[c] == body_value(table.c[c], v) for c, v in zip(key, values, strict=True)]
        except BadValue:
            continue
        if db.session.execute(sa.select(sa.literal(1)).select_from(table).where(*match).limit(1)).first():
            return values
    return None


def _key_text(value):
    """A key's value as PostgreSQL writes it in a detail."""
    if isinstance(value, bool):
        return "t" if value else "f"
    return value if isinstance(value, str) else json.dumps(value)


FILTER_CODES = {
    "syntax": Rest.BAD_QUERY,
    "column": Rest.UNDEFINED_COLUMN,
    "value": Rest.INVALID_TEXT,
    "operator": Rest.UNDEFINED_FUNCTION,
}
REFUSAL_CODES = {
    "unique": Rest.UNIQUE_VIOLATION,
    "foreign_key": Rest.FOREIGN_KEY_VIOLATION,
    "referenced": Rest.FOREIGN_KEY_VIOLATION,
    "constraint": Rest.INTEGRITY_VIOLATION,
    "not_null": Rest.NOT_NULL_VIOLATION,
    "check": Rest.CHECK_VIOLATION,
    "too_long": Rest.STRING_TOO_LONG,
    "out_of_range": Rest.OUT_OF_RANGE,
    "invalid": Rest.INVALID_TEXT,
}


def client_error(exc):
    """The 400 for a FilterError or a BadValue: its message and hint, and the code of its kind; a 404
    for an operator the column's type lacks, as PostgREST answers PostgreSQL's 42883."""
    codes = FILTER_CODES if isinstance(exc, tree.FilterError) else REFUSAL_CODES
    return APIError(404 if exc.kind == "operator" else 400, codes[exc.kind], str(exc), hint=exc.hint)


def database_error(refusal, table, written=()):
    """The 4xx for a Refusal, in words of our own (the database's text can carry data);
    a duplicate key in PostgreSQL's, the constraint named and the key's values (the client's own,
    from the `written` objects) in details."""
    if refusal.kind == "unique" and refusal.constraint is not None:
        values = _duplicate(table, refusal.key, written)
        details = None
        if values is not None:
            details = f"Key ({', '.join(refusal.key)})=({', '.join(map(_key_text, values))}) already exists."
        message = f'duplicate key value violates unique constraint "{refusal.constraint}"'
        return APIError(409, Rest.UNIQUE_VIOLATION, message, details=details)
    named = f' in column "{refusal.column}"' if refusal.column else ""
    status, message = {
        "unique": (409, "duplicate key value violates unique constraint"),
        "foreign_key": (
            409,
            f'foreign key violation: a value in table "{table.name}" refers to a missing row',
        ),
        "referenced": (
            409,
            f'foreign key violation: other rows still refer to this row of table "{table.name}"',
        ),
        "constraint": (409, f'the row violates a constraint of table "{table.name}"'),
        "not_null": (400, f"null value{named} violates not-null constraint"),
        "check": (400, f'new row for table "{table.name}" violates check constraint'),
        "too_long": (400, f"value too long{named}"),
        "out_of_range": (400, f"value out of range{named}"),
        "invalid": (400, f"invalid value{named}"),
    }[refusal.kind]
    return APIError(status, REFUSAL_CODES[refusal.kind], message)


# --- what the database said when it refused a statement


def schema_changed(exc):
    """Whether a statement failed because a table or column it names is gone."""
    if dialect() == "sqlite":
        text = str(exc.orig)
        return text.startswith(("no such column", "no such table")) or "has no column named" in text
    return error_code(exc) in (1054, 1146)


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
    key: tuple = ()  # a unique violation's columns, when the database says which
    constraint: str | None = None  # and the constraint's name, as PostgreSQL would call it


SQLITE_KEY = re.compile(r"UNIQUE constraint failed: (.+)")
MYSQL_KEY = re.compile(r"for key '(?:[^'.]+\.)?([^'.]+)'")


def _unique_key(exc, table):
    """A unique violation's columns and constraint name (`items_pkey`, `items_code_key`, as
    PostgreSQL names them); ((), None) when the error does not say."""
    primary = tuple(c.key for c in primary_key(table))
    text = str(exc.orig) if dialect() == "sqlite" else str(getattr(exc.orig, "args", ("", ""))[-1])
    if dialect() == "sqlite":
        found = SQLITE_KEY.search(text)
        columns = (
            tuple(part.strip().rpartition(".")[2] for part in found.group(1).split(",")) if found else ()
        )
        index = None
    else:
        found = MYSQL_KEY.search(text)
        index = found.group(1) if found else None
        columns = primary if index == "PRIMARY" else _index_columns(table, index)
    if not columns or not all(c in table.c for c in columns):
        return (), None
    if columns == primary:
        return columns, f"{table.name}_pkey"
    if index and index != columns[0]:  # MySQL names an index after its first column unless told
        return columns, index
    return columns, f"{table.name}_{'_'.join(columns)}_key"


def _index_columns(table, name):
    for index in [*table.indexes, *table.constraints]:
        if getattr(index, "name", None) == name and isinstance(index, sa.Index | sa.UniqueConstraint):
            return tuple(c.key for c in index.columns)
    try:
        found = sa.inspect(db.engine).get_indexes(table.name)
    except sa.exc.SQLAlchemyError:
        return ()
    return next((tuple(i["column_names"]) for i in found if i["name"] == name), ())


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
        kind = MYSQL_KINDS.get(error_code(exc))
    if kind is None:
        if isinstance(exc, sa.exc.IntegrityError):
            kind = "constraint"
        elif isinstance(exc, sa.exc.DataError):
            kind = "invalid"
        else:
            return None
    key, constraint = _unique_key(exc, table) if kind == "unique" else ((), None)
    return Refusal(kind, found.group(1) if found and found.group(1) in table.c else None, key, constraint)


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
