"""Fields, the names filters, select= and order= give: a column, perhaps "quoted", and a JSON path
into it (`data->a->>b`, `data->0`). Syntax only: query/resolve.py meets them with the table."""

from __future__ import annotations

import re
from dataclasses import dataclass

from query.tree import FilterError
from values import quoted

_IDENTIFIER = re.compile(r"[\w$]+(?:-(?!>)[\w$]+)*")


_JSON_INDEX = re.compile(r"[0-9]{1,9}(?=->|::|\.|,|\)|$)")


_JSON_KEY = re.compile(r"[^()\-:.,>\"]+(?:-(?!>)[^()\-:.,>\"]+)*")


_BAD_KEY = re.compile(r"[\"\\'\x00-\x1f]")


MAX_JSON_PATH = 16  # keys in one path


MAX_JSON_KEY = 100  # characters of one key


@dataclass(frozen=True)
class Field:
    """A column (`name`) and a JSON path into it: ("->" or "->>", a key or an array index) steps."""

    name: str
    path: tuple = ()


def read_name(text: str, pos: int, where: str) -> tuple[str, int]:
    """A name at `pos`: "quoted" (backslash makes the next character literal) or an identifier."""
    if text.startswith('"', pos):
        chars, pos = [], pos + 1
        while pos < len(text):
            char = text[pos]
            if char == '"':
                if not chars:
                    raise FilterError(f"empty quoted name in {where}")
                return "".join(chars), pos + 1
            if char == "\\" and pos + 1 < len(text):
                pos += 1
                char = text[pos]
            chars.append(char)
            pos += 1
        raise FilterError(f"unterminated quoted name in {where}")
    found = _IDENTIFIER.match(text, pos)
    if found is None:
        raise FilterError(f"expected a column name at {quoted(text[pos:])} in {where}")
    return found.group(), found.end()


def read_path(text: str, pos: int, where: str) -> tuple[tuple, int]:
    path = []
    while text.startswith("->", pos):
        arrow = "->>" if text.startswith("->>", pos) else "->"
        pos += len(arrow)
        if text.startswith('"', pos):
            key, pos = read_name(text, pos, where)
        elif (index := _JSON_INDEX.match(text, pos)) is not None:
            key, pos = int(index.group()), index.end()
        elif (name := _JSON_KEY.match(text, pos)) is not None:
            key, pos = name.group().strip(), name.end()
        elif text.startswith("-", pos):
            raise FilterError(f"negative JSON array indexes are not supported in {where}")
        else:
            raise FilterError(f'missing key after "{arrow}" in {where}')
        if isinstance(key, str) and (not key or len(key) > MAX_JSON_KEY or _BAD_KEY.search(key)):
            raise FilterError(
                f"invalid JSON key {quoted(key)} in {where}",
                hint=f"at most {MAX_JSON_KEY} characters, no quotes, backslashes or control characters",
            )
        if path and path[-1][0] == "->>":
            raise FilterError(f'"->>" must be the last step of a JSON path in {where}')
        path.append((arrow, key))
        if len(path) > MAX_JSON_PATH:
            raise FilterError(f"JSON path too long in {where} (at most {MAX_JSON_PATH} keys)")
    return tuple(path), pos


def parse_field(text: str, where: str = "filter") -> Field:
    """'data->a->>b' -> Field("data", (("->", "a"), ("->>", "b"))); '"my col"' -> Field("my col")."""
    name, pos = read_name(text, 0, where)
    path, pos = read_path(text, pos, where)
    if pos != len(text):
        raise FilterError(f"unexpected {quoted(text[pos:])} after the column name in {where}")
    return Field(name, path)


def is_plain(text: str) -> bool:
    return "->" not in text and not text.startswith('"')


def field_name(text: str) -> str:
    """The column a field text names (for reflection), or the text itself when it does not parse."""
    if is_plain(text):
        return text
    try:
        return parse_field(text).name
    except FilterError:
        return text
