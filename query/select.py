"""select=, syntax only: its text into items (query/tree.py): columns, perhaps renamed, JSON paths,
casts and aggregates, and embedded resources with their own items. query/resolve.py meets them
with the table.

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import functools
import re

from query.dialects import CASTS
from query.fields import read_name, read_path
from query.tree import STAR, EmbedItem, FilterError, SelectItem
from values import quoted

_NAME = re.compile(r"[\w$]+")


_COMPUTED = re.compile(r'->|::|"|\.(?:count|sum|avg|min|max)\(\)|^(?:[\w$]+:)?count\(\)')


_AGGREGATE = re.compile(r"\.(count|sum|avg|min|max)\(\)")


_AGGREGATE_ITEM = re.compile(r"(?:^|[.:])(?:count|sum|avg|min|max)\(\)(?:::\w+)?$")


_CAST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


AGGREGATES = ("count", "sum", "avg", "min", "max")


MAX_SELECT_ITEMS = 500  # SQLite refuses a result of more than 2,000 columns


MAX_EMBED_DEPTH = 4


@functools.lru_cache(maxsize=256)
def parse_select_tree(text: str | None) -> tuple[SelectItem | EmbedItem, ...]:
    """The select= text as items, syntax only: SelectItem("*", "*") for all columns, SelectItem for
    a column (not yet checked against a table), EmbedItem for related rows, nested to
    MAX_EMBED_DEPTH. An app sends the same few selects again and again, and the items are frozen:
    each text is parsed once (a text that is a FilterError is not kept)."""
    if text is None or text.strip() in ("", "*"):
        return (STAR,)
    count = text.count(",") + 1
    if count > MAX_SELECT_ITEMS:
        raise FilterError(f"too many items in select (at most {MAX_SELECT_ITEMS})")
    items = _select_items(text, depth=0)
    return items


def _select_items(text: str, depth: int) -> tuple[SelectItem | EmbedItem, ...]:
    return tuple(_select_item(part.strip(), depth) for part in _split_top_level(text))


def _split_top_level(text: str) -> list[str]:
    """Split at the commas outside parentheses; unbalanced parentheses are a 400."""
    parts, level, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            level += 1
        elif char == ")":
            level -= 1
            if level < 0:
                raise FilterError(f"unbalanced parentheses in select: {quoted(text)}")
        elif char == "," and level == 0:
            parts.append(text[start:index])
            start = index + 1
    if level != 0:
        raise FilterError(f"unbalanced parentheses in select: {quoted(text)}")
    parts.append(text[start:])
    return parts


def _select_item(part: str, depth: int) -> SelectItem | EmbedItem:
    if not part:
        raise FilterError("empty item in select", hint="remove the extra comma")
    if part == "*":
        return STAR
    if "(" in part and not _AGGREGATE_ITEM.search(part):
        return _embed_item(part, depth + 1)
    if _COMPUTED.search(part):
        return _field_item(part)
    alias, colon, name = part.rpartition(":")
    alias, name = alias.strip(), name.strip()
    if not colon:
        alias = name
    elif not _NAME.fullmatch(alias):
        raise FilterError(f"invalid alias {quoted(alias)} in select item {quoted(part)}")
    if not name:
        raise FilterError(f"missing column name in select: {quoted(part)}")
    return SelectItem(name, alias)


def _field_item(part: str) -> SelectItem:
    """`[alias:]field[::type][.aggregate()][::type]` or `[alias:]count()[::type]`, where field is a
    column name, perhaps "quoted", and a JSON path. The default alias is PostgREST's: the
    aggregate's name, else the last key of the path, else the column's name."""
    where = f"select={quoted(part)}"
    alias, pos = None, 0
    try:
        name, end = read_name(part, 0, where)
        if part.startswith(":", end) and not part.startswith("::", end):
            alias, pos = name, end + 1
    except FilterError:
        pass
    while part.startswith(" ", pos):
        pos += 1
    path, cast, aggregate = (), None, None
    if part.startswith("count()", pos):
        column, aggregate, pos = "*", "count", pos + len("count()")
    else:
        column, pos = read_name(part, pos, where)
        path, pos = read_path(part, pos, where)
        cast, pos = _read_cast(part, pos, where)
        found = _AGGREGATE.match(part, pos)
        if found is not None:
            aggregate, pos = found.group(1), found.end()
    aggregate_cast = None
    if aggregate is not None:
        aggregate_cast, pos = _read_cast(part, pos, where)
    if pos != len(part):
        raise FilterError(f"unexpected {quoted(part[pos:])} in {where}")
    if alias is None:
        keys = [key for _, key in path if isinstance(key, str)]
        alias = aggregate or (keys[-1] if keys else column)
    return SelectItem(column, alias, path, cast, aggregate, aggregate_cast)


def _read_cast(text: str, pos: int, where: str) -> tuple[str | None, int]:
    if not text.startswith("::", pos):
        return None, pos
    found = _CAST_NAME.match(text, pos + 2)
    if found is None:
        raise FilterError(f'missing type name after "::" in {where}')
    name = found.group().lower()
    if name not in CASTS:
        raise FilterError(
            f"unknown cast {quoted(found.group())} in {where}", hint="casts: " + ", ".join(sorted(CASTS))
        )
    return name, found.end()


def _embed_item(part: str, depth: int) -> EmbedItem:
    """`[...][alias:]table[!hint][!inner|!left](items)`."""
    if depth > MAX_EMBED_DEPTH:
        raise FilterError(f"embedded resources are nested too deeply (at most {MAX_EMBED_DEPTH} levels)")
    opening = part.index("(")
    if not part.endswith(")"):
        raise FilterError(f"unexpected text after the closing parenthesis in select: {quoted(part)}")
    head, body = part[:opening].strip(), part[opening + 1 : -1]
    spread = head.startswith("...")
    alias, colon, name = head.removeprefix("...").rpartition(":")
    name, *modifiers = name.strip().split("!")
    alias = alias.strip() if colon else name
    hint, inner = None, False
    for modifier in (m.strip() for m in modifiers):
        if modifier in ("inner", "left"):
            inner = modifier == "inner"
        elif hint is None and _NAME.fullmatch(modifier):
            hint = modifier
        else:
            raise FilterError(f"invalid hint {quoted(modifier)} in select: {quoted(part)}")
    if not name.strip():
        raise FilterError(f'missing table name before "(" in select: {quoted(part)}')
    for kind, value in (("table name", name), ("alias", alias)):
        if not _NAME.fullmatch(value):
            raise FilterError(f"invalid {kind} {quoted(value)} in select: {quoted(part)}")
    items = _select_items(body, depth) if body.strip() else ()
    return EmbedItem(name, alias, items, hint, inner, spread)
