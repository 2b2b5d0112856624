"""Names meet the table: select= items, order= items and fields checked against a reflected table,
"*" expanded, computed items given their expression; an unknown name is a 400 that names it
(PostgREST's Plan stage).

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from query.dialects import Cast, json_output, json_text
from query.fields import is_plain, parse_field, read_name, read_path
from query.select import parse_select_tree
from query.tree import STAR, Condition, EmbedItem, FilterError, Logic, OrderItem, SelectItem
from values import quoted


def resolve_column(table: sa.Table, name: str, where: str) -> sa.Column:
    column = table.c.get(name)
    if column is None:
        raise unknown_column(table, name)
    return column


def unknown_column(table: sa.FromClause, name: str) -> FilterError:
    """PostgreSQL's 42703, as PostgREST passes it on: `column items.nme does not exist`, with its
    hint when a column's name is near."""
    # An embed's alias: its table's name; a function's rows (a subquery): their own name.
    table_name = getattr(getattr(table, "element", None), "name", None) or table.name
    near = nearest_column(name, list(table.c.keys())) if len(name) <= 100 else None
    hint = f'Perhaps you meant to reference the column "{table_name}.{near}".' if near else None
    return FilterError(f"column {table_name}.{name[:100]} does not exist", hint=hint, kind="column")


MAX_FUZZY_DISTANCE = 3  # PostgreSQL's, for its "Perhaps you meant to reference the column" hint


def nearest_column(name: str, columns: list[str]) -> str | None:
    """The column PostgreSQL's hint names for a `name` it lacks: the first at the least Levenshtein
    distance, if that is at most 3 and at most half of `name`'s length."""
    best, found = min(MAX_FUZZY_DISTANCE, len(name) // 2) + 1, None
    for column in columns:
        far = distance(column, name)
        if far < best:
            best, found = far, column
    return found


def distance(a: str, b: str) -> int:
    """The Levenshtein distance of `a` and `b` (each edit costs 1)."""
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other)))
        previous = current
    return previous[-1]


def resolve_field(table: sa.Table, text: str, where: str) -> ColumnElement:
    """The column `text` names, or, with a JSON path, the path's value as text (`->>`) or as JSON
    text (`->`), labelled with `text` so that messages name it."""
    if is_plain(text):
        return resolve_column(table, text, where)
    field = parse_field(text, where)
    column = resolve_column(table, field.name, where)
    if not field.path:
        return column
    return json_text(json_column(column, field.path), field.path).label(text)


# PostgreSQL's names of the column types, as its "operator does not exist" error names them.
_PG_TYPES = (
    (sa.Boolean, "boolean"),
    (sa.SmallInteger, "smallint"),
    (sa.BigInteger, "bigint"),
    (sa.Integer, "integer"),
    (sa.Float, "double precision"),
    (sa.Numeric, "numeric"),
    (sa.DateTime, "timestamp without time zone"),
    (sa.Date, "date"),
    (sa.Time, "time without time zone"),
    (sa.LargeBinary, "bytea"),
    (sa.Uuid, "uuid"),
    (sa.Text, "text"),
    (sa.Enum, "text"),
)


_NO_OPERATOR = (
    "No operator matches the given name and argument types. You might need to add explicit type casts."
)


def json_column(column: sa.Column, path: tuple) -> sa.Column:
    """`column`, when a JSON path may go into it: a JSON column. Into any other, PostgreSQL has no
    `->` or `->>` (its 42883, which PostgREST answers with a 404), and a value that is not JSON
    would stop SQLite's query: refused before any SQL, on every database alike."""
    if isinstance(column.type, sa.JSON):
        return column
    name = next((name for kind, name in _PG_TYPES if isinstance(column.type, kind)), None)
    if name is None:
        length = getattr(column.type, "length", None)
        name = "character varying" if length else "text"
    raise FilterError(
        f"operator does not exist: {name} {path[0][0]} unknown",
        hint=_NO_OPERATOR,
        kind="operator",
    )


_AGGREGATE_TYPES = {"count": sa.BigInteger(), "avg": sa.Float(asdecimal=False)}


def _computed(item: SelectItem, table: sa.Table) -> ColumnElement:
    """The expression of a select item that is not a plain column."""
    if item.column == "*":
        expression = sa.func.count()
    else:
        expression = resolve_column(table, item.column, "select")
        if item.path:
            expression = json_output(json_column(expression, item.path), item.path)
        if item.cast:
            expression = Cast(expression, item.cast)
        if item.aggregate:
            function = getattr(sa.func, item.aggregate)
            kind = _AGGREGATE_TYPES.get(item.aggregate, expression.type)
            expression = function(expression, type_=kind)
    if item.aggregate_cast:
        expression = Cast(expression, item.aggregate_cast)
    return expression


def output(item: SelectItem, table: sa.Table) -> ColumnElement:
    """What a resolved select item reads: its column, or the expression computed from it."""
    return table.c[item.column] if item.sql is None else item.sql


def parse_select(text: str | None, table: sa.Table, aggregates: bool = False) -> list[SelectItem]:
    """'*', 'a,b', 'alias:col' -> the columns to return, in the order asked (no embedding)."""
    return resolve_select(parse_select_tree(text), table, aggregates)


def resolve_select(
    items: Iterable[SelectItem | EmbedItem], table: sa.Table, aggregates: bool = False
) -> list[SelectItem]:
    """The tree's columns checked against `table`, "*" expanded, computed items given their
    expression; an embed is a 400 here (a write's or a function's result, where embedding does not
    apply), and so is an aggregate unless `aggregates` (a table's own read)."""
    found = []
    for item in items:
        if isinstance(item, EmbedItem):
            raise FilterError(
                f"embedding {quoted(item.table)} is not supported here: related rows embed in table reads"
            )
        if item is STAR:
            found.extend(_all_columns(table))
        elif item.plain:
            found.append(SelectItem(resolve_column(table, item.column, "select").key, item.alias))
        else:
            if item.aggregate and not aggregates:
                raise FilterError(
                    f"aggregate {item.aggregate}() is not supported here",
                    hint="aggregates apply to a table's own read, without embedded resources",
                )
            found.append(dataclasses.replace(item, sql=_computed(item, table)))
    return found


def _all_columns(table: sa.Table) -> list[SelectItem]:
    # Each alias a str: a reflected column's key is SQLAlchemy's quoted_name, a subclass of str that
    # orjson does not take as a key, and encoding.plain_json would leave every `*` read to json.
    return [SelectItem(column.key, str(column.key)) for column in table.c]


def scoped(nodes: Iterable[Condition | Logic]) -> dict[tuple[str, ...], list[Condition | Logic]]:
    """The filter nodes by the path of the resource they filter, () for the table itself, with the
    path taken off their column names."""
    found: dict[tuple[str, ...], list[Condition | Logic]] = {}
    for node in nodes:
        if isinstance(node, Condition) and "." in node.column:
            *path, column = node.column.split(".")
            found.setdefault(tuple(path), []).append(dataclasses.replace(node, column=column))
        else:
            found.setdefault(getattr(node, "path", ()), []).append(node)
    return found


MAX_ORDER_ITEMS = 50


_DIRECTIONS = {"asc": False, "desc": True}


_NULLS = {"nullsfirst": "first", "nullslast": "last"}


def parse_order(text: str | None, table: sa.Table) -> list[OrderItem]:
    """'a.desc,b.asc.nullslast,c' -> order items; every part must be known."""
    if text is None:
        return []
    parts = text.split(",")
    if len(parts) > MAX_ORDER_ITEMS:
        raise FilterError(f"too many items in order (at most {MAX_ORDER_ITEMS})")
    return [_parse_order_item(part.strip(), table) for part in parts]


def _parse_order_item(part: str, table: sa.Table) -> OrderItem:
    if is_plain(part):
        name, *modifiers = (piece.strip() for piece in part.split("."))
    else:  # a quoted name or a JSON path: the field first, then its modifiers
        name, pos = read_name(part, 0, f"order {quoted(part)}")
        pos = read_path(part, pos, f"order {quoted(part)}")[1]
        name, rest = part[:pos], part[pos:].strip()
        if rest and not rest.startswith("."):
            raise FilterError(f"unexpected {quoted(rest)} in order {quoted(part)}")
        modifiers = [piece.strip() for piece in rest.split(".")[1:]]
    if not name:
        raise FilterError(f"empty item in order {quoted(part)}", hint='write "order=col.desc"')
    column = resolve_field(table, name, "order")
    descending: bool | None = None
    nulls: str | None = None
    for modifier in modifiers:
        if modifier in _DIRECTIONS and descending is None:
            descending = _DIRECTIONS[modifier]
        elif modifier in _NULLS and nulls is None:
            nulls = _NULLS[modifier]
        else:
            raise FilterError(
                f"unknown modifier {quoted(modifier)} in order {quoted(part)}",
                hint="use asc or desc, then nullsfirst or nullslast, once each",
            )
    return OrderItem(column.key if is_plain(name) else name, bool(descending), nulls)
