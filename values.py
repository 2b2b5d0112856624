"""Values into columns: query-string text and JSON body values converted to a column's type, and
request bodies parsed as strict JSON. Database values back out, as JSON and CSV, are encoding.py's.

Pure: no Flask, no I/O. A value that does not fit its column raises BadValue."""

import json
import math
import re
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

MAX_INTEGER = 2**63  # integers are 64-bit on both databases

_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII digits only, as [0-9] (never \d) spells them
_BOOLEANS = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}


def whole_number(value):
    """A client's whole number: a JSON integer, or text of 1 to 18 ASCII digits (no sign, space or
    underscore); None for anything else. Never str.isdigit or a bare int(): both take digits such as
    ², ①, Arabic-Indic or fullwidth ones, and int() then fails on some of them."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return None


class BadValue(ValueError):
    """A value its column cannot take; str(e) is the client-facing message. `kind` is "invalid",
    "too_long" or "out_of_range"."""

    def __init__(self, message, hint=None, kind="invalid"):
        super().__init__(message)
        self.hint = hint
        self.kind = kind


def quoted(text):
    """Client text quoted for a message, cut short so an error never echoes a huge value."""
    return f'"{text}"' if len(text) <= 60 else f'"{text[:57]}..."'


# --- column types


def python_type(column_type):
    """The Python type of a column type; None when SQLAlchemy does not know a precise one."""
    try:
        kind = column_type.python_type
    except NotImplementedError:
        return None
    return None if kind is object else kind


def is_tinyint_boolean(column_type):
    # MySQL has no BOOLEAN: BOOL is TINYINT(1), which clients read and write as true/false.
    return isinstance(column_type, mysql.TINYINT) and column_type.display_width == 1


def is_booleanish(column_type):
    """May take is.true / is.false; a type SQLAlchemy cannot name gets the benefit of the doubt."""
    return python_type(column_type) in (bool, None) or is_tinyint_boolean(column_type)


# --- text in (query strings, and strings in a JSON body)


def convert_value(column, raw):
    """A query-string value converted to the column's Python type."""
    if not isinstance(raw, str):
        raise BadValue(f"expected a single value for column {quoted(column.key)}")
    column_type = column.type
    if isinstance(column_type, sa.Enum) and column_type.enums:
        if raw not in column_type.enums:
            raise BadValue(
                f"{quoted(raw)} is not a valid value for column {quoted(column.key)}",
                hint="one of: " + ", ".join(column_type.enums),
            )
        return raw
    kind = python_type(column_type)
    if kind is None and not isinstance(column_type, sa.JSON):
        return raw  # a type SQLAlchemy cannot describe: let the database compare the text
    try:
        label, convert = _CONVERTERS[kind]
    except KeyError:
        raise BadValue(
            f"cannot filter column {quoted(column.key)} of type {type(column_type).__name__} by value"
        ) from None
    try:
        return convert(raw, column_type)
    except (ValueError, OverflowError, ArithmeticError):
        raise BadValue(f"{quoted(raw)} is not a valid {label} for column {quoted(column.key)}") from None


def _to_int(raw, column_type):
    text = raw.strip()
    if is_tinyint_boolean(column_type) and text.lower() in _BOOLEANS:
        return int(_BOOLEANS[text.lower()])
    if not _INTEGER.fullmatch(text):
        raise ValueError(raw)
    value = int(text)
    if not -MAX_INTEGER <= value < MAX_INTEGER:
        raise ValueError(raw)
    return value


def _to_float(raw, column_type):
    text = raw.strip()
    if not _NUMBER.fullmatch(text) or not math.isfinite(float(text)):
        raise ValueError(raw)
    return float(text)


def _to_decimal(raw, column_type):
    _to_float(raw, column_type)  # same syntax and range: drivers may pass it through a double
    return Decimal(raw.strip())


def _to_bool(raw, column_type):
    try:
        return _BOOLEANS[raw.strip().lower()]
    except KeyError:
        raise ValueError(raw) from None


def _iso(raw):
    text = raw.strip()
    return text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text


def _to_date(raw, column_type):
    return date.fromisoformat(raw.strip())


def _to_datetime(raw, column_type):
    value = datetime.fromisoformat(_iso(raw))
    if value.tzinfo is not None and not getattr(column_type, "timezone", False):
        # Naive columns hold UTC here, so compare in UTC rather than drop the offset.
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _to_time(raw, column_type):
    value = time.fromisoformat(_iso(raw))
    if value.tzinfo is not None and not getattr(column_type, "timezone", False):
        value = datetime.combine(date(2000, 1, 2), value).astimezone(UTC).time()
    return value


def _to_uuid(raw, column_type):
    return uuid.UUID(raw.strip())


_CONVERTERS: dict[type, tuple[str, Callable[[str, sa.types.TypeEngine], object]]] = {
    str: ("string", lambda raw, column_type: raw),
    int: ("integer", _to_int),
    float: ("number", _to_float),
    Decimal: ("number", _to_decimal),
    bool: ("boolean (true or false)", _to_bool),
    date: ("date (YYYY-MM-DD)", _to_date),
    datetime: ("date-time (ISO 8601)", _to_datetime),
    time: ("time (HH:MM[:SS])", _to_time),
    uuid.UUID: ("UUID", _to_uuid),
    bytes: ("string", lambda raw, column_type: raw.encode("utf-8")),
}


# --- JSON in (request bodies)


def body_value(column, value):
    """A JSON body value converted to the column's type; BadValue naming the column when it does not fit."""
    converted = _from_json(column, value)
    length = getattr(column.type, "length", None)
    if (
        isinstance(converted, str)
        and isinstance(column.type, sa.String)
        and length
        and len(converted) > length
    ):
        raise BadValue(
            f'value too long for column "{column.key}" (at most {length} characters)', kind="too_long"
        )
    if is_tinyint_boolean(column.type) and converted not in (None, 0, 1):
        raise BadValue(f'column "{column.key}" takes true or false')
    return converted


def body_converter(column):
    """body_value for `column`, as a function of the value, with what it asks of the column's type
    worked out once: the common values (a string for a text column, a number for a numeric one, a
    null) go straight through; any other value, or one that does not fit, goes through body_value."""
    column_type = column.type
    kind = None if isinstance(column_type, sa.JSON) else python_type(column_type)
    text = kind is str and not isinstance(column_type, sa.Enum)
    length = (
        (getattr(column_type, "length", None) or math.inf) if isinstance(column_type, sa.String) else math.inf
    )
    integer = kind is int and not is_tinyint_boolean(column_type)
    number = kind is float

    def convert(value):
        if value is None:
            return None
        sent = type(value)
        if text and sent is str and len(value) <= length:
            return value
        if (integer or number) and sent is int and -MAX_INTEGER <= value < MAX_INTEGER:
            return float(value) if number else value
        if number and sent is float and math.isfinite(value):
            return value
        return body_value(column, value)

    return convert


def _from_json(column, value):
    if value is None or isinstance(column.type, sa.JSON):
        return value
    kind = python_type(column.type)
    if isinstance(value, str):
        return convert_value(column, value)
    if isinstance(value, dict | list):
        raise _refused(column, value)
    if isinstance(value, bool):
        if kind is bool or kind is None:
            return value
        if is_tinyint_boolean(column.type):
            return int(value)
        raise _refused(column, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _refused(column, value)
    if kind is None:
        return value
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise _refused(column, value)
        if not -MAX_INTEGER <= int(value) < MAX_INTEGER:
            raise _refused(column, value, kind="out_of_range")
        return int(value)
    if kind is float:
        return float(value)
    if kind is Decimal:
        return Decimal(str(value))
    if kind is bool and value in (0, 1):
        return bool(value)
    if kind is str:
        return convert_value(column, str(value))
    raise _refused(column, value)


def _refused(column, value, kind="invalid"):
    sent = {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}.get(
        type(value), "a number"
    )
    label = type(column.type).__name__.lower()
    return BadValue(f'column "{column.key}" ({label}) cannot take {sent}', kind=kind)


# --- request bodies

MAX_DEPTH = 32  # of nested objects and arrays in a body


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text):
    """A JSON number with a fraction or an exponent; one too large for a double (`1e999`, which
    Python reads as infinity) is refused as NaN is: no database stores it as JSON."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:20]} is out of range")
    return number


def strict_json(raw):
    """`raw` bytes parsed as strict JSON: UTF-8, no NaN or Infinity (not even as a number too large
    for a double, `1e999`), no unpaired surrogate (it cannot be stored), at most MAX_DEPTH levels.
    A ValueError for anything else."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("too deeply nested") from None
    if b"\\u" not in raw and raw.count(b"{") + raw.count(b"[") <= MAX_DEPTH:
        # No escape, so no surrogate (strict UTF-8 has none); no more containers than MAX_DEPTH, so
        # none nested deeper: nothing for the walk below to find, as in most bodies.
        return data
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ValueError("too deeply nested")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                pending.append((key, depth))
                pending.append((item, depth + 1))
        elif isinstance(value, str):
            value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for an unpaired surrogate
    return data
