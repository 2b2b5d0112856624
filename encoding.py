"""Values out of columns: database values as JSON (a read's rows, each column looked at whole),
as CSV fields as PostgREST writes them, and as text to show. What goes into a column is values.py's.

Pure: no Flask, no I/O."""

import json
import math
import operator
import re
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal

import orjson

from values import MAX_INTEGER, is_tinyint_boolean


def json_value(column, value):
    """A database value as JSON: ISO dates, numbers as numbers, MySQL's TINYINT(1) as a boolean."""
    if value is None or isinstance(value, str | bool | dict | list):
        return value
    if isinstance(value, int):
        return bool(value) if is_tinyint_boolean(column.type) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date | time):
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


AS_THEY_ARE = frozenset({str, int, type(None)})  # JSON as they are (not bool: it is not int by type)
FLOATS = frozenset({float, type(None)})  # JSON as they are when finite
# The smallest magnitude of a float that plain_json writes as json.dumps does (0 aside): below it
# orjson writes 0.00001 where json writes 1e-05; at and above it the two agree on every float.
PLAIN_FLOAT = 1e-4

_PAST_ASCII = re.compile("[\x7f-\U0010ffff]")


def plain_json(value):
    """`value`, of dicts, lists, text, integers and nulls only, as the compact JSON json.dumps
    writes (separators "," and ":", ensure_ascii), by orjson, which is ~10x faster. orjson writes
    the characters past ASCII (and DEL) as they are where json.dumps writes a \\u escape (a UTF-16
    pair past U+FFFF): they are escaped so after. Floats only of PLAIN_FLOAT or more (or 0): the
    two write smaller ones differently (json 1e-05, orjson 0.00001)."""
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an integer past 64 bits, a lone surrogate
        return json.dumps(value, separators=(",", ":"), check_circular=False)
    return _ascii(text)


# Floats orjson writes otherwise than json.dumps: from 1e-5 to 1e-4 in positional notation (0.00001
# where json writes 1e-05) and a one-digit negative exponent (1.5e-7, json 1.5e-07). Looked for in
# what orjson wrote: a string holding the same characters only costs that value a json.dumps. Two
# searches, each for a literal re finds quickly: as one alternation they took ten times as long.
_SHORT_EXPONENT = re.compile(rb"e-\d(?!\d)")
_SMALL_POSITIONAL = re.compile(rb"\.0000")
# Types json.dumps hands to its `default`, which orjson would write itself: dates and times,
# dataclasses, and subclasses of str, int, dict and list (markup, a column name as a key).
_NOT_ORJSON = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _refuse(value):
    raise TypeError


def compact_json(value):
    """`value` as json.dumps writes it compact and ensure_ascii, by orjson; or None where the caller
    must ask json.dumps: a value only its `default` can write (a date, a Decimal, a dataclass, a
    subclass of a JSON type), a float orjson writes otherwise, an integer past 64 bits. A UUID is
    written as its text, as Flask's `default` writes it. NaN and the infinities, which json writes
    as NaN and Infinity (not JSON: no browser reads them), are null; strict_json refuses them in
    every body, so none is stored through the API."""
    try:
        text = orjson.dumps(value, default=_refuse, option=_NOT_ORJSON)
    except orjson.JSONEncodeError:
        return None
    if _SMALL_POSITIONAL.search(text) or _SHORT_EXPONENT.search(text):
        return None
    return _ascii(text)


def _ascii(text):
    """orjson's `text` with json's ensure_ascii escapes: as it is when it holds none to make."""
    if text.isascii() and b"\x7f" not in text:
        return text
    return _PAST_ASCII.sub(_escaped, text.decode())


def _escaped(match):
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def row_shape(table, items):
    """What json_rows needs to know of the select items (a plan keeps it): each one's alias,
    column, and whether its strings, integers and NULLs are JSON as they are (not MySQL's booleans)."""
    shape = []
    for item in items:
        column = table.c[item.column] if getattr(item, "sql", None) is None else item.sql
        shape.append((item.alias, column, not is_tinyint_boolean(column.type)))
    return tuple(shape)


def json_rows(shape, rows):
    """Database rows as dicts keyed by the select items' aliases, in JSON values (json_columns), each
    row made a dict in one call. A row's columns past the items (a key kept beside them) are left
    out."""
    return json_page(shape, rows)[0]


def json_page(shape, rows):
    """(json_rows of `rows`, whether plain_json can write them)."""
    found, plain = json_columns(
        [(position, column, plain) for position, (_, column, plain) in enumerate(shape)], rows
    )
    aliases = [alias for alias, _, _ in shape]
    return [dict(zip(aliases, row, strict=False)) for row in found], plain


def json_columns(items, rows):
    """`rows` with the values at the `items`' positions ((position, column, plain), plain as
    row_shape says) as JSON values, and whether every one of those is text, an integer, null or a
    float of PLAIN_FLOAT or more (plain_json can write them). A column that holds only text,
    integers and NULLs (not MySQL's booleans), or only finite floats and NULLs, goes as it is, any
    other through json_value: the columns are looked at whole, each in a few calls, not one per
    value. The rows themselves when nothing was converted."""
    converted, plain_only = None, True
    for position, column, plain in items:
        values = list(map(operator.itemgetter(position), rows))
        kinds = set(map(type, values))
        if plain and kinds <= AS_THEY_ARE:
            continue
        if kinds <= FLOATS:
            numbers = list(filter(None, values))  # NULLs and zeros left out
            if all(map(math.isfinite, numbers)):
                plain_only = plain_only and min(map(abs, numbers), default=PLAIN_FLOAT) >= PLAIN_FLOAT
                continue
        plain_only = False
        if converted is None:
            converted = [list(row) for row in rows]
        for row in converted:
            row[position] = json_value(column, row[position])
    return (rows if converted is None else converted), plain_only


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet would run as a formula


def text_value(value):
    """A JSON value as text to show; NULL is empty. Text a spreadsheet would run as a formula gets
    a leading ' (numbers stay as they are: -5 is a number, not a formula)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        value = json.dumps(value)
    elif not isinstance(value, str):
        return str(value)
    return "'" + value if value.startswith(FORMULA_STARTS) else value


CSV_QUOTED = frozenset('",\\()')


def csv_field(value):
    """A JSON value as one CSV field, as PostgREST writes it (PostgreSQL's text of a row): NULL is
    an empty field, a boolean t or f; text that is empty or holds a space, a comma, a quote, a
    backslash or a parenthesis is quoted, a quote doubled and a backslash too. Text a spreadsheet
    would run as a formula gets a leading ' (numbers stay as they are: -5 is a number, not a
    formula), which PostgREST does not do."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    elif not isinstance(value, str):
        return str(value)
    if value.startswith(FORMULA_STARTS):
        value = "'" + value
    if value and not any(char in CSV_QUOTED or char.isspace() for char in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '""') + '"'
