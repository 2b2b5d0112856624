"""values.py and encoding.py: query-string and JSON values converted to column types, and database
values back to JSON and CSV text."""

import enum
import json
import math
import random
import struct
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

import encoding
from encoding import csv_field, json_rows, json_value, row_shape
from values import MAX_DEPTH, BadValue, body_converter, body_value, convert_value, strict_json, whole_number

kinds = sa.Table(
    "kinds",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(50)),
    sa.Column("note", sa.Text),
    sa.Column("price", sa.Float),
    sa.Column("active", sa.Boolean),
    sa.Column("born", sa.Date),
    sa.Column("created", sa.DateTime),
    sa.Column("amount", sa.Numeric(10, 2)),
    sa.Column("at", sa.Time),
    sa.Column("at_tz", sa.DateTime(timezone=True)),
    sa.Column("key", sa.Uuid),
    sa.Column("colour", sa.Enum("red", "green", name="colour")),
    sa.Column("flag", mysql.TINYINT(display_width=1)),
    sa.Column("small", mysql.TINYINT()),
    sa.Column("blob", sa.LargeBinary),
    sa.Column("doc", sa.JSON),
    sa.Column("mystery", sa.types.NullType()),
)

# ---------------------------------------------------------------------------
# Query-string text in: (column, raw, expected)

CONVERT_CASES = [
    (kinds.c.id, "42", 42),
    (kinds.c.id, " 7 ", 7),
    (kinds.c.id, "-3", -3),
    (kinds.c.id, "+3", 3),
    (kinds.c.id, "9223372036854775807", 2**63 - 1),
    (kinds.c.price, "1.5", 1.5),
    (kinds.c.price, "2", 2.0),
    (kinds.c.price, "-.5e1", -5.0),
    (kinds.c.active, "TRUE", True),
    (kinds.c.active, "t", True),
    (kinds.c.active, "1", True),
    (kinds.c.active, "False", False),
    (kinds.c.active, "F", False),
    (kinds.c.active, "0", False),
    (kinds.c.born, "2024-02-29", date(2024, 2, 29)),
    (kinds.c.created, "2024-01-01T10:00:00", datetime(2024, 1, 1, 10)),
    (kinds.c.created, "2024-01-01 10:00", datetime(2024, 1, 1, 10)),
    (kinds.c.created, "2024-01-01T10:00:00Z", datetime(2024, 1, 1, 10)),
    (kinds.c.created, "2024-01-01T12:00:00+02:00", datetime(2024, 1, 1, 10)),
    (kinds.c.created, "2024-01-01", datetime(2024, 1, 1)),
    (kinds.c.name, "  x ", "  x "),
    (kinds.c.note, "", ""),
    (kinds.c.amount, "1.10", Decimal("1.10")),
    (kinds.c.at, "10:30", time(10, 30)),
    (kinds.c.at, "10:30:00Z", time(10, 30)),
    (kinds.c.at, "12:30+02:00", time(10, 30)),
    (kinds.c.at_tz, "2024-01-01T10:00:00Z", datetime.fromisoformat("2024-01-01T10:00:00+00:00")),
    (kinds.c.key, "12345678-1234-5678-1234-567812345678", uuid.UUID("12345678-1234-5678-1234-567812345678")),
    (kinds.c.colour, "green", "green"),
    (kinds.c.flag, "true", 1),
    (kinds.c.flag, "false", 0),
    (kinds.c.flag, "2", 2),
    (kinds.c.small, "5", 5),
    (kinds.c.blob, "ab", b"ab"),
    (kinds.c.mystery, "anything", "anything"),
]


@pytest.mark.parametrize(("column", "raw", "expected"), CONVERT_CASES)
def test_convert_value(column, raw, expected):
    value = convert_value(column, raw)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("column", "raw", "message"),
    [
        (kinds.c.id, "abc", '"abc" is not a valid integer for column "id"'),
        (kinds.c.id, "-9223372036854775809", "not a valid integer"),
        (kinds.c.id, "1e3", "not a valid integer"),
        (kinds.c.price, "1.2.3", 'not a valid number for column "price"'),
        (kinds.c.price, "Infinity", "not a valid number"),
        (kinds.c.active, "yes", "not a valid boolean"),
        (kinds.c.born, "01/02/2024", "not a valid date"),
        (kinds.c.created, "0001-01-01T00:00:00+01:00", "not a valid date-time"),
        (kinds.c.amount, "NaN", 'not a valid number for column "amount"'),
        (kinds.c.amount, "1e99999", "not a valid number"),
        (kinds.c.at, "25:00", 'not a valid time (HH:MM[:SS]) for column "at"'),
        (kinds.c.key, "not-a-uuid", 'not a valid UUID for column "key"'),
        (kinds.c.colour, "blue", '"blue" is not a valid value for column "colour"'),
        (kinds.c.small, "true", "not a valid integer"),
        (kinds.c.doc, "{}", 'cannot filter column "doc" of type JSON by value'),
        (kinds.c.name, ("a",), "expected a single value"),
        (kinds.c.id, "x" * 1000, '"' + "x" * 57 + '..." is not a valid integer'),
    ],
)
def test_convert_value_refuses(column, raw, message):
    with pytest.raises(BadValue) as error:
        convert_value(column, raw)
    assert message in str(error.value)


# ---------------------------------------------------------------------------
# JSON body values in: (column, value, expected) and (column, value, kind, message)


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        (kinds.c.id, 7, 7),
        (kinds.c.id, 7.0, 7),
        (kinds.c.id, "7", 7),
        (kinds.c.price, 2, 2.0),
        (kinds.c.amount, 1.1, Decimal("1.1")),
        (kinds.c.active, True, True),
        (kinds.c.active, 0, False),
        (kinds.c.flag, True, 1),
        (kinds.c.name, 5, "5"),
        (kinds.c.name, None, None),
        (kinds.c.doc, {"a": [1]}, {"a": [1]}),
        (kinds.c.mystery, 3, 3),
    ],
)
def test_body_value(column, value, expected):
    converted = body_value(column, value)
    assert converted == expected
    assert type(converted) is type(expected)


@pytest.mark.parametrize(
    ("column", "value", "kind", "message"),
    [
        (kinds.c.id, "x", "invalid", '"x" is not a valid integer for column "id"'),
        (kinds.c.id, 1.5, "invalid", 'column "id" (integer) cannot take a number'),
        (kinds.c.id, True, "invalid", 'column "id" (integer) cannot take a boolean'),
        (kinds.c.id, [1], "invalid", 'column "id" (integer) cannot take an array'),
        (kinds.c.name, {"a": 1}, "invalid", 'column "name" (string) cannot take an object'),
        (kinds.c.price, float("nan"), "invalid", 'column "price" (float) cannot take a number'),
        (kinds.c.id, 2**63, "out_of_range", 'column "id" (integer) cannot take a number'),
        (kinds.c.name, "x" * 51, "too_long", 'value too long for column "name" (at most 50 characters)'),
        (kinds.c.flag, 2, "invalid", 'column "flag" takes true or false'),
    ],
)
def test_body_value_refuses(column, value, kind, message):
    with pytest.raises(BadValue) as error:
        body_value(column, value)
    assert error.value.kind == kind and str(error.value) == message


BODY_VALUES = [
    None, 0, 1, 2, -7, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**400, 1.5, 2.0, -0.0, float("nan"),
    float("inf"), True, False, "", "x", "7", "x" * 51, "x" * 50, "red", "blue", "2024-01-02",
    "2024-01-02T03:04:05Z", "12:30", "true", str(uuid.UUID(int=5)), [1], {"a": 1},
]  # fmt: skip


@pytest.mark.parametrize("column", list(kinds.c), ids=lambda column: column.key)
def test_body_converter_answers_as_body_value_does(column):
    """The per-column converter a reflected table keeps gives what body_value gives, value for value,
    refusals included."""
    convert = body_converter(column)
    for value in BODY_VALUES:
        try:
            expected = ("value", body_value(column, value))
        except (BadValue, OverflowError) as exc:
            expected = ("refused", type(exc), str(exc), getattr(exc, "kind", None))
        try:
            got = ("value", convert(value))
        except (BadValue, OverflowError) as exc:
            got = ("refused", type(exc), str(exc), getattr(exc, "kind", None))
        assert got == expected, value
        if got[0] == "value":
            assert type(got[1]) is type(expected[1]), value


def nested(depth):
    """`depth` arrays, one inside the other."""
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "\\ud800"}',  # a lone surrogate, escaped
        b'{"\\udfff": 1}',  # in a key
        b'[1, ["x", "\\ud83d"]]',  # nested, beside other values
        nested(MAX_DEPTH + 1),
        b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
    ],
)
def test_strict_json_refuses_surrogates_and_depth(raw):
    with pytest.raises(ValueError):
        strict_json(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": "\\u00e9\\\\ud800"}', {"a": "\u00e9\\ud800"}),  # escapes, none a lone surrogate
        (b'["\\ud83d\\ude00"]', ["\U0001f600"]),  # a pair is one character
        (nested(2), [[]]),
        (b'{"a": "' + b"[" * 40 + b'", "b": [1, {"c": null}]}', {"a": "[" * 40, "b": [1, {"c": None}]}),
    ],
)
def test_strict_json_takes_what_is_within_its_rules(raw, expected):
    assert strict_json(raw) == expected


def test_strict_json_takes_the_deepest_nesting_allowed():
    data = strict_json(nested(MAX_DEPTH))
    for _ in range(MAX_DEPTH - 1):
        data = data[0]
    assert data == []


# ---------------------------------------------------------------------------
# Out: (column, database value, JSON value) and CSV fields


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        (kinds.c.flag, 1, True),
        (kinds.c.small, 1, 1),
        (kinds.c.created, datetime(2024, 1, 1, 10, 30), "2024-01-01T10:30:00"),
        (kinds.c.amount, Decimal("12"), 12),
        (kinds.c.amount, Decimal("1.50"), 1.5),
        (kinds.c.amount, Decimal("NaN"), "NaN"),
        (kinds.c.price, float("inf"), "inf"),
        (kinds.c.at, timedelta(minutes=1), 60.0),
        (kinds.c.blob, b"\x01\xff", "\\x01ff"),
        (kinds.c.key, uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (kinds.c.mystery, {"b", "a"}, ["a", "b"]),
    ],
)
def test_json_value(column, value, expected):
    assert json_value(column, value) == expected


JSON_ROW_VALUES = [
    None,
    0,
    7,
    -1,
    1.5,
    -0.0,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "x",
    True,
    {"a": 1},
]


@pytest.mark.parametrize(
    "columns",
    [
        [[1, None, 2], ["a", "b", None], [1.5, None, 0.0], [1, 0, None]],  # all as they are
        [[1.5, float("inf")], [float("nan"), None], [1, 2.5], [True, 1]],  # not finite, mixed, bool
        [[JSON_ROW_VALUES[(n + k) % 13] for n in range(13)] for k in range(4)],
        [[], [], [], []],
    ],
)
def test_json_rows_shape_each_value_as_json_value_does(columns):
    """json_rows passes a column of common values through whole: what it gives is still json_value's
    for each value, a float that is not finite included (JSON has no NaN)."""
    names = ("id", "name", "price", "flag")
    items = [SimpleNamespace(column=name, alias=f"as_{name}") for name in names]
    rows = [(*row, "a key kept beside") for row in zip(*columns, strict=True)]
    shaped = json_rows(row_shape(kinds, items), rows)
    assert shaped == [
        {f"as_{name}": json_value(kinds.c[name], value) for name, value in zip(names, row, strict=False)}
        for row in rows
    ]
    for row, expected in zip(shaped, rows, strict=True):
        assert [type(value) for value in row.values()] == [
            type(json_value(kinds.c[name], value)) for name, value in zip(names, expected, strict=False)
        ]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (None, ""),
        (True, "t"),
        (False, "f"),
        (1.5, "1.5"),
        (-5, "-5"),
        ("plain", "plain"),
        ("", '""'),
        ("a b", '"a b"'),
        ("yellow, ripe", '"yellow, ripe"'),
        ('it\'s "sweet"', '"it\'s ""sweet"""'),
        ("a\\b", '"a\\\\b"'),
        ("(x)", '"(x)"'),
        ("line\nbreak", '"line\nbreak"'),
        ("=1+1", "'=1+1"),
        ({"a": [1, "é"]}, '"{""a"": [1, ""é""]}"'),
    ],
)
def test_csv_field_is_postgresqls_text_of_a_row(value, field):
    """PostgREST's CSV is PostgreSQL's text of each row without its parentheses."""
    assert csv_field(value) == field


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(60, 60), ("60", 60), ("007", 7), ("9" * 18, int("9" * 18)), (0, 0), ("²", None), ("①", None),
     ("¹¹", None), ("١٢", None), ("１２", None), ("𝟙", None), ("1_000", None), (" 60", None), ("60\n", None),
     ("+6", None), ("-6", None), ("6.0", None), ("", None), ("9" * 19, None), (True, None), (6.0, None),
     (None, None), ([6], None)],
)  # fmt: skip
def test_whole_number_takes_ascii_digits_only(raw, expected):
    assert whole_number(raw) == expected


def test_plain_json_writes_what_json_dumps_writes():
    """Every character (control characters, DEL, past ASCII, past U+FFFF), integers to 64 bits and
    past them, nested dicts and lists: the bytes json.dumps writes, compact and ensure_ascii."""
    text = "".join(chr(code) for code in range(0x110000) if not 0xD800 <= code < 0xE000)
    for value in (
        [{"k": text, "n": None, "small": -(2**63), "large": 2**64 - 1, "t": True, "e": [], "o": {}}],
        {"é\U0001d11e": [text[:300], [["x\x7f"]]]},
        [{"past 64 bits": 2**70}],
        "plain ascii",
        [],
    ):
        expected = json.dumps(value, separators=(",", ":"))
        written = encoding.plain_json(value)
        assert (written.decode() if isinstance(written, bytes) else written) == expected


def test_plain_json_writes_each_float_of_plain_float_or_more_as_json_does():
    rng = random.Random(42)
    floats = [0.0, -0.0, 1e-4, -1e-4, 0.1, 2.5, 5e-4, 123456.789, 1e15, 1e16, 1e22, 1.7976931348623157e308]
    floats += [struct.unpack("d", rng.randbytes(8))[0] for _ in range(50_000)]
    floats += [
        m * 10.0**e for e in range(-4, 308) for m in (1.0, 1.5, -2.2250738585072014, 9.999999999999999)
    ]
    floats += [round(rng.uniform(-1e6, 1e6), rng.randint(0, 6)) for _ in range(20_000)]
    floats = [x for x in floats if math.isfinite(x) and (x == 0 or abs(x) >= encoding.PLAIN_FLOAT)]
    assert len(floats) > 30_000
    for x in floats:
        written = encoding.plain_json([x, {"x": x}])
        assert (written.decode() if isinstance(written, bytes) else written) == json.dumps(
            [x, {"x": x}], separators=(",", ":")
        ), x
    assert (
        encoding.plain_json([1e-05]) != json.dumps([1e-05], separators=(",", ":")).encode()
    )  # why the floor


def test_compact_json_writes_json_dumps_bytes_or_leaves_the_value_to_json():
    """What orjson writes is kept only where it is json.dumps's bytes (compact, ensure_ascii): every
    float, however small, every character; None sends the value to json.dumps. The values an API
    answers with (text, integers, booleans, ordinary floats, UUIDs) take the fast path."""
    rng = random.Random(7)
    text = "".join(chr(code) for code in range(0x110000) if not 0xD800 <= code < 0xE000)
    floats = [m * 10.0**e for e in range(-12, 23) for m in (1.0, -1.5, 4.823040373928001, 9.999999999999999)]
    floats += [rng.uniform(-10, 10) * 10.0 ** rng.randint(-15, 25) for _ in range(20_000)]
    floats += [struct.unpack("d", rng.randbytes(8))[0] for _ in range(20_000)]
    floats = [x for x in floats if math.isfinite(x)]
    fast = 0
    others = [[{"k": text, "t": True, "f": False, "n": None}], [2**64 - 1]]
    for value in [[x, {"x": x}] for x in floats] + others:
        written = encoding.compact_json(value)
        if written is not None:
            fast += 1
            assert (written.decode() if isinstance(written, bytes) else written) == json.dumps(
                value, separators=(",", ":")
            ), value
    assert fast > 0.9 * len(floats)  # the exponents from -4 to -9 only go to json
    identity = {"identity_id": str(uuid.UUID(int=7)), "created_at": "2026-11-29T12:00:00Z"}
    user = {"id": "7", "email": "ann@example.com", "ok": True, "identities": [identity]}
    assert encoding.compact_json(user) == json.dumps(user, separators=(",", ":")).encode()
    key = uuid.uuid4()
    assert encoding.compact_json([key]) == f'["{key}"]'.encode()  # as Flask's default writes it
    assert encoding.compact_json([float("nan"), float("inf")]) == b"[null,null]"
    assert encoding.compact_json([Words.ONE]) == json.dumps([Words.ONE]).encode()
    for left in ([1e-05], [-2.5e-07], [2**64], {1: "a"}, [date(2026, 1, 2)], [datetime(2026, 1, 2)],
                 [Decimal("1.5")], [SimpleNamespace()], {Name("k"): 1}, [Name("v")]):  # fmt: skip
        assert encoding.compact_json(left) is None, left


class Words(enum.IntEnum):
    ONE = 1


class Name(str):
    """A subclass of str, as SQLAlchemy's quoted_name is."""


@pytest.mark.parametrize(
    ("values", "plain"),
    [
        ([2.5, None, 0.0, -0.0, 1e16], True),
        ([2.5, 1e-05], False),  # plain_json would write 0.00001
        ([2.5, float("nan")], False),
        ([1, 2], True),
        ([True], False),
    ],
)
def test_a_column_is_plain_only_where_plain_json_writes_it_as_json_does(values, plain):
    column = kinds.c.price if isinstance(values[0], float) else kinds.c.id
    _, found = encoding.json_columns([(0, column, True)], [(value,) for value in values])
    assert found is plain
