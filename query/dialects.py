"""What differs between SQLite and MySQL/MariaDB in the SQL the query package writes: casts, JSON
paths, LIKE/GLOB and REGEXP matching, and where NULLs sort. Each is a SQLAlchemy construct
compiled for each database, or a function of the dialect's family ("sqlite" or "mysql").

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from query.patterns import MAX_PATTERN, compiled_pattern, glob_pattern, like_pattern
from values import python_type

_DIALECTS = {"sqlite": "sqlite", "mysql": "mysql", "mariadb": "mysql"}


def family(name: str) -> str:
    try:
        return _DIALECTS[name]
    except KeyError:
        # The caller's bug, not the client's: deliberately not a FilterError.
        raise ValueError(f"unsupported SQL dialect {name!r}") from None


# PostgreSQL type names a select item may be cast to: (SQLite, MySQL, the result's type).
_TEXT = ("TEXT", "CHAR CHARACTER SET utf8mb4", sa.String())


_INTEGER = ("INTEGER", "SIGNED", sa.BigInteger())


_NUMERIC = ("NUMERIC", "DECIMAL(65, 10)", sa.Numeric(asdecimal=False))


_FLOAT = ("REAL", "DOUBLE", sa.Float(asdecimal=False))


CASTS = {
    **dict.fromkeys(("text", "varchar", "char", "bpchar"), _TEXT),
    **dict.fromkeys(("int", "int2", "int4", "int8", "integer", "smallint", "bigint"), _INTEGER),
    **dict.fromkeys(("numeric", "decimal"), _NUMERIC),
    **dict.fromkeys(("real", "float", "float4", "float8"), _FLOAT),
}


class Cast(FunctionElement):
    """CAST(expression AS type) for one of CASTS, written for each database."""

    inherit_cache = False  # the type's name is no clause: a cached statement would keep another

    def __init__(self, expression: ColumnElement, name: str):
        self.cast_name = name
        self.type = CASTS[name][2]
        super().__init__(expression)


@compiles(Cast)
def _cast_mysql(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS {CASTS[element.cast_name][1]})"


@compiles(Cast, "sqlite")
def _cast_sqlite(element, compiler, **kw):
    value = compiler.process(element.clauses, **kw)
    if CASTS[element.cast_name] is _INTEGER:
        # PostgreSQL rounds a number cast to an integer (as MySQL does); SQLite would truncate.
        rounded = f"CAST(ROUND({compiler.process(element.clauses, **kw)}) AS INTEGER)"
        return f"(CASE WHEN typeof({value}) = 'integer' THEN {value} ELSE {rounded} END)"
    return f"CAST({value} AS {CASTS[element.cast_name][0]})"


def _json_path(path: tuple) -> str:
    """The path as the databases' JSON path text: $."key"[0]. Keys hold no quote or backslash."""
    return "$" + "".join(f"[{key}]" if isinstance(key, int) else f'."{key}"' for _, key in path)


class _JsonDocument(FunctionElement):
    """`->`: the JSON value at a path, read back as JSON."""

    type = sa.JSON()
    inherit_cache = True


class _JsonText(FunctionElement):
    """`->>`: the value at a path as text (NULL for JSON null), as PostgreSQL's ->> answers."""

    type = sa.String()
    inherit_cache = True


class _JsonLiteral(FunctionElement):
    """`->` in a filter or an order: the JSON text of the value ('"ann"', '5'), what PostgreSQL's
    jsonb comparison of `data->name=eq."ann"` matches."""

    type = sa.String()
    inherit_cache = True


@compiles(_JsonDocument)
def _json_document_mysql(element, compiler, **kw):
    return f"JSON_EXTRACT({compiler.process(element.clauses, **kw)})"


@compiles(_JsonDocument, "sqlite")
@compiles(_JsonLiteral, "sqlite")
def _json_arrow_sqlite(element, compiler, **kw):
    # SQLite's -> answers the JSON text of the value, which its JSON type reads back as JSON.
    column, path = (compiler.process(clause, **kw) for clause in element.clauses)
    return _if_json(column, f"({column} -> {path})")


@compiles(_JsonText)
def _json_text_mysql(element, compiler, **kw):
    extract = f"JSON_EXTRACT({compiler.process(element.clauses, **kw)})"
    return f"(CASE WHEN JSON_TYPE({extract}) = 'NULL' THEN NULL ELSE JSON_UNQUOTE({extract}) END)"


@compiles(_JsonText, "sqlite")
def _json_text_sqlite(element, compiler, **kw):
    column, path = (compiler.process(clause, **kw) for clause in element.clauses)
    return _if_json(column, f"CAST(({column} ->> {path}) AS TEXT)")


def _if_json(column: str, expression: str) -> str:
    """`expression` where the column holds JSON, else NULL: SQLite keeps any text in a JSON column,
    and its -> and ->> stop the whole query at a value that is not JSON. MySQL's JSON columns hold
    JSON only (MariaDB's by a CHECK); MariaDB answers NULL too for text that is not."""
    return f"(CASE WHEN json_valid({column}) THEN {expression} END)"


@compiles(_JsonLiteral)
def _json_literal_mysql(element, compiler, **kw):
    return f"CAST(JSON_EXTRACT({compiler.process(element.clauses, **kw)}) AS CHAR CHARACTER SET utf8mb4)"


def _path_parameter(path: tuple) -> ColumnElement:
    # A bound parameter, never SQL text: a key reaches the database as a value.
    return sa.bindparam(None, _json_path(path), type_=sa.String())


def json_text(column: ColumnElement, path: tuple) -> ColumnElement:
    kind = _JsonText if path[-1][0] == "->>" else _JsonLiteral
    return kind(column, _path_parameter(path))


def json_output(column: ColumnElement, path: tuple) -> ColumnElement:
    """A JSON path as a select item: JSON for `->`, text for `->>`."""
    if path[-1][0] == "->>":
        return _JsonText(column, _path_parameter(path))
    return _JsonDocument(column, _path_parameter(path))


def as_text(column: sa.Column, dialect: str) -> ColumnElement:
    if dialect == "mysql":
        # Also makes binary and non-string columns comparable as utf8mb4 text.
        return sa.cast(column, mysql.CHAR(charset="utf8mb4"))
    return column if python_type(column.type) is str else sa.cast(column, sa.String())


def case_sensitive_pattern(pattern: str, dialect: str) -> str:
    """A LIKE filter's pattern for the database's case-sensitive matcher (`like`)."""
    # SQLite's LIKE ignores case; GLOB is its case-sensitive matcher, with patterns of its own.
    return glob_pattern(pattern) if dialect == "sqlite" else like_pattern(pattern)


def like(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    text = as_text(column, dialect)
    if dialect == "sqlite":
        return text.op("GLOB", is_comparison=True)(pattern)
    # Binary collation: case- and accent-sensitive whatever the column's own collation.
    return text.collate("utf8mb4_bin").like(pattern)


def ilike(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    pattern = sa.func.lower(pattern)
    lowered = sa.func.lower(as_text(column, dialect))
    if dialect == "sqlite":
        return lowered.like(pattern, escape="\\")
    # Lower both sides, then compare binary so the column's collation cannot fold accents.
    return lowered.collate("utf8mb4_bin").like(pattern)


def match(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    text = as_text(column, dialect)
    if dialect == "mysql":
        # Binary collation: case-sensitive unless the pattern says (?i), whatever the column's own.
        text = text.collate("utf8mb4_bin")
    return text.op("REGEXP", is_comparison=True)(pattern)


NULLS_ORDER_SUPPORTED = sqlite3.sqlite_version_info >= (3, 30, 0)


def placing_nulls(clause: ColumnElement, column: ColumnElement, first: bool, dialect: str) -> list:
    """The ORDER BY keys that sort `column` as `clause` does with its NULLs first or last. MySQL and
    SQLite sort NULL as the smallest value. SQLite (3.30 and later) is told where NULLs go, which
    keeps an index on the column usable; MySQL has no NULLS FIRST/LAST, so a leading IS NULL key
    moves them."""
    if dialect == "sqlite" and NULLS_ORDER_SUPPORTED:
        return [clause.nulls_first() if first else clause.nulls_last()]
    is_null = column.is_(None)
    return [is_null.desc() if first else is_null.asc(), clause]


def sqlite_regexp(pattern: object, value: object) -> bool | None:
    """SQLite's REGEXP (`value REGEXP pattern` calls regexp(pattern, value)), registered on each
    connection. Patterns come checked by check_pattern; one that is not (a policy's SQL) is held
    to the same length bound."""
    if pattern is None or value is None:
        return None
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
        raise ValueError("regular expression too long")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return compiled_pattern(pattern).search(str(value)) is not None
