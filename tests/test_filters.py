"""query/: both filter dialects, values, LIKE semantics, select and order, on SQLite and MariaDB."""

import uuid
from datetime import date, datetime

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import mysql

from query.filters import parse_filters
from query.resolve import parse_order, parse_select
from query.sql import build, order_clauses, where_clause
from query.tree import OPERATORS, RESERVED, Condition, FilterError, Logic, OrderItem, SelectItem

metadata = sa.MetaData()
items = sa.Table(
    "items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(50)),
    sa.Column("price", sa.Float),
    sa.Column("active", sa.Boolean),
    sa.Column("born", sa.Date),
    sa.Column("created", sa.DateTime),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("user_id", sa.Integer),
)
# Only for the LIKE property test: one string per row.
words = sa.Table("words", metadata, sa.Column("word", sa.String(100)))

ROWS = [
    (1, "Apple", 1.5, True, date(1990, 1, 1), datetime(2024, 1, 1, 10), "red", 1),
    (2, "apple pie", 3.25, False, date(1985, 6, 15), datetime(2024, 2, 1, 12, 30), None, 1),
    (3, "BANANA", 0.5, True, None, datetime(2024, 3, 1, 8), "yellow, ripe", 2),
    (4, "cherry_tart", None, None, date(2000, 12, 31), None, "50% off", 2),
    (5, "a*b?c", 10.0, True, date(1970, 1, 1), datetime(2023, 12, 31, 23, 59, 59), "[x] box", None),
    (6, "50% off", 2.0, False, date(1999, 9, 9), datetime(2024, 1, 15), 'say "hi"', 3),
    (7, None, 7.0, True, date(2010, 5, 5), datetime(2024, 5, 5, 5, 5), "back\\slash", 3),
    (8, "Éclair", 4.0, False, date(1995, 3, 3), datetime(2024, 6, 6), "(paren), [b]", 1),
]
ALL = [row[0] for row in ROWS]
C, L = Condition, Logic


# ---------------------------------------------------------------------------
# Parsing: (query-string pairs, expected nodes)

PARSE_CASES = [
    # the seed's dotted dialect: the whole value is the operand
    ([("name.eq", "apple")], [C("name", "eq", "apple")]),
    ([("name.eq", "eq.x")], [C("name", "eq", "eq.x")]),
    ([("name.eq", "")], [C("name", "eq", "")]),
    ([("name.eq", '"quoted"')], [C("name", "eq", '"quoted"')]),
    ([("price.gte", "1.5")], [C("price", "gte", "1.5")]),
    ([("name.like", "%a%")], [C("name", "like", "%a%")]),
    ([("name.ilike", "*A_")], [C("name", "ilike", "*A_")]),
    ([("id.in", '[1,2,"a,b"]')], [C("id", "in", ("1", "2", "a,b"))]),
    ([("id.in", "(1,2)")], [C("id", "in", ("1", "2"))]),
    ([("id.in", "[]")], [C("id", "in", ())]),
    ([("name.in", '["a]b", "c(d"]')], [C("name", "in", ("a]b", "c(d"))]),
    ([("name.in", r'["a\"b","c\\d"]')], [C("name", "in", ('a"b', "c\\d"))]),
    ([("name.in", '[" x ", y]')], [C("name", "in", (" x ", " y"))]),
    ([("name.in", '[""]')], [C("name", "in", ("",))]),
    ([("note.is", "NULL")], [C("note", "is", "NULL")]),
    ([("name.not.eq", "x")], [C("name", "eq", "x", True)]),
    # PostgREST's native dialect
    ([("name", "eq.apple")], [C("name", "eq", "apple")]),
    ([("name", "eq.a.b")], [C("name", "eq", "a.b")]),
    ([("name", "eq.")], [C("name", "eq", "")]),
    ([("name", 'eq."q"')], [C("name", "eq", '"q"')]),
    ([("name", "neq.x")], [C("name", "neq", "x")]),
    ([("name", "not.eq.x")], [C("name", "eq", "x", True)]),
    ([("price", "lt.3")], [C("price", "lt", "3")]),
    ([("id", 'in.(1,2,"a,b")')], [C("id", "in", ("1", "2", "a,b"))]),
    ([("id", "in.()")], [C("id", "in", ())]),
    ([("id", "not.in.()")], [C("id", "in", (), True)]),
    ([("id", "in.[1]")], [C("id", "in", ("1",))]),
    ([("note", "is.null")], [C("note", "is", "null")]),
    ([("active", "not.is.true")], [C("active", "is", "true", True)]),
    ([("name", "like.*a*")], [C("name", "like", "*a*")]),
    ([("name", "not.ilike.A\\*")], [C("name", "ilike", "A\\*", True)]),
    # a dotted key whose last part is no operator, with a native value: a (dotted) column name
    ([("a.b", "eq.1")], [C("a.b", "eq", "1")]),
    # logic trees
    ([("or", "(id.eq.1,price.gt.2)")], [L("or", (C("id", "eq", "1"), C("price", "gt", "2")))]),
    ([("and", "(id.gte.1,id.lte.3)")], [L("and", (C("id", "gte", "1"), C("id", "lte", "3")))]),
    ([("not.or", "(id.eq.1,id.eq.2)")], [L("or", (C("id", "eq", "1"), C("id", "eq", "2")), True)]),
    ([("not.and", "(id.eq.1)")], [L("and", (C("id", "eq", "1"),), True)]),
    (
        [("or", "(a.eq.1,and(b.gt.2,c.not.is.null))")],
        [L("or", (C("a", "eq", "1"), L("and", (C("b", "gt", "2"), C("c", "is", "null", True)))))],
    ),
    (
        [("or", "(a.eq.1,not.and(b.eq.2,or(c.eq.3,d.not.eq.4)))")],
        [
            L(
                "or",
                (
                    C("a", "eq", "1"),
                    L(
                        "and",
                        (C("b", "eq", "2"), L("or", (C("c", "eq", "3"), C("d", "eq", "4", True)))),
                        True,
                    ),
                ),
            )
        ],
    ),
    (
        [("or", r'(name.eq."a,b",name.in.(1,"x)y"),note.eq."say \"hi\"",note.eq."\\")')],
        [
            L(
                "or",
                (
                    C("name", "eq", "a,b"),
                    C("name", "in", ("1", "x)y")),
                    C("note", "eq", 'say "hi"'),
                    C("note", "eq", "\\"),
                ),
            )
        ],
    ),
    ([("or", "( id.eq.1 , id.eq.2 )")], [L("or", (C("id", "eq", "1 "), C("id", "eq", "2 ")))]),
    ([("or", "(name.eq.,id.in.())")], [L("or", (C("name", "eq", ""), C("id", "in", ())))]),
    ([("or", "(name.eq.a.b)")], [L("or", (C("name", "eq", "a.b"),))]),
    ([("and", '(name.like."*,*")')], [L("and", (C("name", "like", "*,*"),))]),
    # both dialects in one query string; the caller's reserved keys are skipped
    (
        [
            ("select", "id"),
            ("order", "id"),
            ("limit", "1"),
            ("offset", "0"),
            ("on_conflict", "id"),
            ("columns", "id"),
            ("apikey", "k"),
            ("id.eq", "1"),
            ("name", "eq.x"),
            ("or", "(id.eq.2)"),
        ],
        [C("id", "eq", "1"), C("name", "eq", "x"), L("or", (C("id", "eq", "2"),))],
    ),
    ([], []),
]


@pytest.mark.parametrize(("pairs", "expected"), PARSE_CASES)
def test_parse_filters(pairs, expected):
    assert parse_filters(pairs) == expected


def nested(depth):
    return "(" + "or(" * (depth - 1) + "id.eq.1" + ")" * depth


MALFORMED_CASES = [
    ([("name", "eqq.1")], 'unknown operator "eqq" in filter "name"'),
    ([("name.eqq", "1")], 'unknown operator "eqq" in filter "name.eqq"'),
    ([("name.eqq", "")], 'unknown operator "eqq" in filter "name.eqq"'),
    ([("name", "fts.word")], 'operator "fts" is not supported'),
    ([("name", "like(some).{a*}")], 'unknown operator "like(some)"'),
    ([("name", "is(any).{null}")], 'unknown operator "is(any)"'),
    ([("name", "")], 'missing operator in filter "name"'),
    ([("name", "not.")], 'missing operator in filter "name"'),
    ([("name", ".x")], 'missing operator in filter "name"'),
    ([("name", "eq")], 'missing "." and value after operator "eq" in filter "name"'),
    ([("name", "not.eq")], 'missing "." and value after operator "eq"'),
    ([("name", "apple")], 'unknown operator "apple" in filter "name"'),
    ([("name", "not.not.eq.1")], "missing operator"),
    ([("", "eq.1")], "empty filter name"),
    ([(".eq", "1")], 'missing column name in filter ".eq"'),
    ([("select.eq", "1")], '"select" is a reserved name, not a column'),
    ([("apikey.not.eq", "1")], '"apikey" is a reserved name'),
    ([("or.eq", "1")], '"or" is a reserved name'),
    ([("or", "(and.eq.1)")], '"and" is a reserved name'),
    ([("note", "is.maybe")], 'invalid value "maybe" for "is" in filter "note"'),
    ([("note.is", "nil")], 'invalid value "nil" for "is"'),
    ([("note", "is.")], 'invalid value "" for "is"'),
    ([("name", "like.abc\\")], "ends with an escape character"),
    ([("name.ilike", "\\")], "ends with an escape character"),
    ([("name.like", "a\x00b")], "NUL character"),
    # "in" lists
    ([("id", "in.1,2")], 'malformed "in" list for column "id": expected a list'),
    ([("id", "in.")], 'malformed "in" list for column "id"'),
    ([("id", "in.(1,2")], 'malformed "in" list for column "id": missing ")"'),
    ([("id", "in.(1,2]")], 'missing ")"'),
    ([("id", "in.(1,,2)")], "empty list element"),
    ([("id", "in.(1,)")], "empty list element"),
    ([("id", "in.(1,2) x")], "unexpected text after the list"),
    ([("id", "in.(1,2))")], "unexpected text after the list"),
    ([("id.in", "1,2")], "expected a list"),
    ([("id.in", "")], "expected a list"),
    ([("id.in", '["a" b]')], 'expected "," or "]"'),
    ([("id.in", '["a')], "unterminated quoted value"),
    ([("id.in", '["a\\"]')], "unterminated quoted value"),
    ([("id", "in.(" + ",".join(["1"] * 10_001) + ")")], "too many filter values"),
    ([("id", "eq.1")] * 201, "too many filter conditions"),
    # logic trees
    ([("or", "(a.eq.1")], 'unbalanced parentheses in "or" filter'),
    ([("or", "(a.eq.1))")], 'unbalanced parentheses in "or" filter'),
    ([("and", "(a.eq.1,or(b.eq.2)")], 'unbalanced parentheses in "and" filter'),
    ([("not.or", "(a.in.(1,2)")], 'unbalanced parentheses in "not.or" filter'),
    ([("or", "a.eq.1")], 'malformed "or" filter: the conditions must be in parentheses'),
    ([("or", "")], "must be in parentheses"),
    ([("or", "()")], 'expected a condition such as "col.eq.value"'),
    ([("or", "(a.eq.1,)")], "expected a condition"),
    ([("or", "(,a.eq.1)")], "expected a condition"),
    ([("or", "((a.eq.1))")], "expected a condition"),
    ([("or", "(a.eq.1) x")], "unexpected text after the closing parenthesis"),
    ([("or", "(a)")], 'expected "." and an operator after "a"'),
    ([("or", "(a.eqq.1)")], 'unknown operator "eqq" in "or" filter'),
    ([("or", "(a.cs.{1})")], 'operator "cs" is not supported'),
    ([("or", "(a.eq)")], 'expected "." and a value after operator "eq"'),
    ([("or", "(a.not)")], 'unknown operator "not"'),
    ([("or", '(a.eq."x)')], "unterminated quoted value"),
    ([("or", '(a.eq."x"y)')], "unexpected text after a quoted value"),
    ([("or", "(a.in.1)")], "expected a list"),
    ([("or", "(a.in.(1,2)x)")], 'expected "," or ")"'),
    ([("or", "(a.is.maybe)")], 'invalid value "maybe" for "is" in "or" filter'),
    ([("or", "(a.like.x\\)")], "ends with an escape character"),
    ([("or", "(xor(a.eq.1))")], 'expected "." and an operator after "xor"'),
    ([("or", nested(17))], '"or" filter is nested too deeply (at most 16 levels)'),
    ([("or", nested(10_000))], "nested too deeply"),
]


@pytest.mark.parametrize(("pairs", "message"), MALFORMED_CASES)
def test_malformed_filters(pairs, message):
    with pytest.raises(FilterError) as error:
        parse_filters(pairs)
    assert message in str(error.value)


def test_nesting_up_to_the_limit_is_fine():
    (node,) = parse_filters([("or", nested(16))])
    assert where_clause([node], items, "sqlite") is not None


TABLE_ERROR_CASES = [
    ([("nme", "eq.1")], "column items.nme does not exist"),
    ([("nme.eq", "1")], "column items.nme does not exist"),
    ([("or", "(id.eq.1,nme.eq.1)")], "column items.nme does not exist"),
    ([("name.eqq", "eq.1")], "column items.name.eqq does not exist"),
    ([("id", "eq.abc")], '"abc" is not a valid integer for column "id"'),
    ([("id.eq", "1.5")], '"1.5" is not a valid integer for column "id"'),
    ([("id.eq", "")], '"" is not a valid integer for column "id"'),
    ([("id", "eq.")], '"" is not a valid integer for column "id"'),
    ([("id", "eq.1_000")], "not a valid integer"),
    ([("id", "eq.٣")], "not a valid integer"),
    ([("id", "eq.9223372036854775808")], "not a valid integer"),
    ([("id", "eq." + "9" * 5000)], "not a valid integer"),
    ([("user_id", "in.(1,x)")], '"x" is not a valid integer for column "user_id"'),
    ([("user_id", "in.(1,null)")], '"null" is not a valid integer'),
    ([("or", "(id.eq.1,price.lt.x)")], '"x" is not a valid number for column "price"'),
    ([("price", "gt.nan")], "not a valid number"),
    ([("price", "gt.inf")], "not a valid number"),
    ([("price", "gt.1e999")], "not a valid number"),
    ([("price", "gt.1,5")], "not a valid number"),
    ([("active", "eq.yes")], 'not a valid boolean (true or false) for column "active"'),
    ([("active.eq", "")], "not a valid boolean"),
    ([("born", "eq.2024-13-01")], 'not a valid date (YYYY-MM-DD) for column "born"'),
    ([("born", "eq.2024-01-01T10:00")], "not a valid date"),
    ([("created", "gt.yesterday")], 'not a valid date-time (ISO 8601) for column "created"'),
    ([("created", "gt.")], "not a valid date-time"),
    ([("name", "is.true")], '"is.true" needs a boolean column; "name" is not one'),
    ([("id", "not.is.false")], '"is.false" needs a boolean column'),
]


@pytest.mark.parametrize(("pairs", "message"), TABLE_ERROR_CASES)
def test_filters_the_table_refuses(pairs, message):
    nodes = parse_filters(pairs)
    for dialect in ("sqlite", "mysql"):
        with pytest.raises(FilterError) as error:
            where_clause(nodes, items, dialect)
        assert message in str(error.value)


def test_unknown_column_suggests_the_nearest():
    with pytest.raises(FilterError) as error:
        where_clause(parse_filters([("nme", "eq.x")]), items, "sqlite")
    assert error.value.hint == 'Perhaps you meant to reference the column "items.name".'
    with pytest.raises(FilterError) as error:
        where_clause(parse_filters([("zzzzzz", "eq.x")]), items, "sqlite")
    assert error.value.hint is None


def test_unknown_operator_hint_lists_the_operators():
    with pytest.raises(FilterError) as error:
        parse_filters([("name", "eqq.1")])
    assert error.value.hint == (
        "operators: eq, neq, gt, gte, lt, lte, like, ilike, match, imatch, in, is, isdistinct"
    )


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (C("id", "eq", ("1",)), 'expected a single value, not a list, for column "id"'),
        (C("id", "in", "1"), '"in" needs a list'),
        (C("id", "between", "1"), 'unknown operator "between"'),
        (L("xor", (C("id", "eq", "1"),)), 'unknown logic operator "xor"'),
        (L("or", ()), 'empty "or" filter'),
        (C("note", "is", "maybe"), 'invalid value "maybe" for "is"'),
    ],
)
def test_hand_built_nodes_are_checked_too(node, message):
    with pytest.raises(FilterError) as error:
        where_clause([node], items, "sqlite")
    assert message in str(error.value)


def test_where_clause_of_nothing_is_none():
    assert where_clause([], items, "sqlite") is None


def test_unsupported_dialect_is_a_programming_error():
    with pytest.raises(ValueError) as error:
        where_clause(parse_filters([("id", "eq.1")]), items, "postgresql")
    assert not isinstance(error.value, FilterError)
    assert where_clause(parse_filters([("id", "eq.1")]), items, "mariadb") is not None


def test_public_constants():
    assert RESERVED == {"select", "order", "limit", "offset", "on_conflict", "columns", "or", "and", "apikey"}
    assert OPERATORS == {
        *("eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "in", "is"),
        *("match", "imatch", "isdistinct"),
    }
    assert FilterError("m").hint is None
    assert str(FilterError("m", "h")) == "m"


# ---------------------------------------------------------------------------
# Behaviour on a real database: (pairs, ids of the matching rows)

SQL_CASES = [
    ([], ALL),
    ([("name.eq", "Apple")], [1]),
    ([("name", "eq.Apple")], [1]),
    ([("name", "neq.Apple")], [2, 3, 4, 5, 6, 8]),
    ([("name", "not.eq.Apple")], [2, 3, 4, 5, 6, 8]),
    ([("id.gt", "6")], [7, 8]),
    ([("id", "gte.7")], [7, 8]),
    ([("id.lt", "3")], [1, 2]),
    ([("id", "lte.2")], [1, 2]),
    ([("price.gt", "3")], [2, 5, 7, 8]),
    ([("price", "lt.1")], [3]),
    ([("price.eq", "2")], [6]),
    ([("active.eq", "true")], [1, 3, 5, 7]),
    ([("active", "eq.f")], [2, 6, 8]),
    ([("active", "is.true")], [1, 3, 5, 7]),
    ([("active", "is.FALSE")], [2, 6, 8]),
    ([("active", "not.is.true")], [2, 4, 6, 8]),
    ([("active", "is.null")], [4]),
    ([("active", "gt.false")], [1, 3, 5, 7]),
    ([("active.lte", "false")], [2, 6, 8]),
    ([("note", "is.null")], [2]),
    ([("note", "not.is.null")], [1, 3, 4, 5, 6, 7, 8]),
    ([("name.is", "NULL")], [7]),
    ([("born", "gt.2000-01-01")], [4, 7]),
    ([("born.lt", "1980-01-01")], [5]),
    ([("created", "gte.2024-03-01")], [3, 7, 8]),
    ([("created", "lt.2024-01-01T00:00:00Z")], [5]),
    ([("created.eq", "2024-01-01T12:00:00+02:00")], [1]),
    # in
    ([("user_id", "in.(1,3)")], [1, 2, 6, 7, 8]),
    ([("user_id.in", "[2]")], [3, 4]),
    ([("user_id", "not.in.(1,2)")], [6, 7]),
    ([("id", "in.()")], []),
    ([("id.in", "[]")], []),
    ([("id", "not.in.()")], ALL),
    ([("name", 'in.("apple pie","50% off")')], [2, 6]),
    ([("name.in", '["BANANA", "a*b?c"]')], [3, 5]),
    ([("note.in", r'["yellow, ripe", "say \"hi\""]')], [3, 6]),
    ([("note", 'in.("(paren), [b]")')], [8]),
    # like is case-sensitive; * and % match any run, _ one character, \ escapes
    ([("name.like", "%apple%")], [2]),
    ([("name", "like.*pple*")], [1, 2]),
    ([("name", "like.A*")], [1]),
    ([("name.like", "a%")], [2, 5]),
    ([("name", "like.B_N*")], [3]),
    ([("name.like", "_____")], [1, 5]),
    ([("name.like", "______")], [3, 8]),
    ([("name.like", "%")], [1, 2, 3, 4, 5, 6, 8]),
    ([("name.like", "%\\*%")], [5]),
    ([("name.like", "*?*")], [5]),
    ([("name.like", "a\\*b?c")], [5]),
    ([("name.like", "50\\% off")], [6]),
    ([("name.like", "%\\% off")], [6]),
    ([("name.like", "%\\_%")], [4]),
    ([("name", "like.cherry\\_t*")], [4]),
    ([("name.like", "Éclair")], [8]),
    ([("name.like", "éclair")], []),
    ([("note.like", "[x]*")], [5]),
    ([("note.like", "*[b]*")], [8]),
    ([("note.like", "*]")], [8]),
    ([("note.like", "back\\\\slash")], [7]),
    ([("note.like", '%"hi"%')], [6]),
    ([("note", "like.*, *")], [3, 8]),
    ([("name", "not.like.*a*")], [1, 3, 6]),
    # like on columns that are not text
    ([("id.like", "1*")], [1]),
    ([("user_id", "like.3")], [6, 7]),
    ([("born.like", "199*")], [1, 6, 8]),
    # ilike
    ([("name.ilike", "%APPLE%")], [1, 2]),
    ([("name", "ilike.*banana*")], [3]),
    ([("name", "ilike.a*")], [1, 2, 5]),
    ([("name.ilike", "_____")], [1, 5]),
    ([("name.ilike", "%\\%%")], [6]),
    ([("name.ilike", "A\\*B?C")], [5]),
    ([("name", "ilike.ÉCLAIR")], [8]),
    ([("note", "ilike.*RED*")], [1]),
    ([("note", "ilike.[X]*")], [5]),
    ([("name", "not.ilike.*a*")], [6]),
    # logic trees
    ([("or", "(id.eq.1,id.eq.3)")], [1, 3]),
    ([("or", "(id.eq.1, id.eq.3)")], [1, 3]),
    ([("or", "(id.eq.1,and(user_id.eq.3,price.gt.5))")], [1, 7]),
    ([("and", "(user_id.eq.1,or(price.lt.2,note.is.null))")], [1, 2]),
    ([("not.or", "(user_id.eq.1,user_id.is.null)")], [3, 4, 6, 7]),
    ([("not.and", "(active.is.true,price.gt.1)")], [2, 3, 4, 6, 8]),
    ([("or", '(name.like.*pie,name.eq."50% off")')], [2, 6]),
    ([("or", r'(note.eq."yellow, ripe",note.in.("say \"hi\"","(paren), [b]"))')], [3, 6, 8]),
    ([("or", "(id.not.in.(1,2,3,4,5,6),name.is.null)")], [7, 8]),
    ([("or", "(id.in.(),note.ilike.*BOX)")], [5]),
    ([("and", "(id.not.in.(),id.lt.3)")], [1, 2]),
    ([("or", "(name.ilike.apple,not.and(id.gt.1,id.lt.8))")], [1, 8]),
    # several filters are AND-ed, in either dialect
    ([("user_id.eq", "1"), ("price", "gt.2"), ("or", "(active.is.false,note.is.null)")], [2, 8]),
    ([("id", "gt.1"), ("id.lt", "4"), ("name", "like.*A*")], [3]),
]


def _admin_sql(server_url, sql):
    admin = sa.create_engine(server_url)
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(sql)
    finally:
        admin.dispose()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def engine(request):
    """The rows above on in-memory SQLite, or in a fresh MariaDB database when the suite has one."""
    if request.param == "sqlite":
        engine = sa.create_engine("sqlite://")
        drop = None
    else:
        try:
            server = request.getfixturevalue("mariadb_server")  # from tests/conftest.py
        except pytest.FixtureLookupError:
            pytest.skip("no mariadb_server fixture (run without --noconftest)")
        name = f"filters_test_{uuid.uuid4().hex[:12]}"
        _admin_sql(server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        engine = sa.create_engine(server.set(database=name))
        drop = f"DROP DATABASE IF EXISTS {name}"
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(items.insert(), [dict(zip(items.c.keys(), row, strict=True)) for row in ROWS])
    yield engine
    engine.dispose()
    if drop:
        _admin_sql(server, drop)


@pytest.fixture(scope="module", params=["declared", "reflected"])
def table(request, engine):
    """The table as declared here, and as the service sees it: reflected (MySQL: TINYINT(1), not BOOLEAN)."""
    if request.param == "declared":
        return items
    return sa.Table("items", sa.MetaData(), autoload_with=engine)


def ids(engine, table, pairs, order=None):
    query = sa.select(table.c.id)
    clause = where_clause(parse_filters(pairs), table, engine.dialect.name)
    if clause is not None:
        query = query.where(clause)
    query = query.order_by(*order_clauses(parse_order(order or "id", table), table, engine.dialect.name))
    with engine.connect() as connection:
        return list(connection.scalars(query))


@pytest.mark.parametrize(("pairs", "expected"), SQL_CASES)
def test_filters_on_the_database(engine, table, pairs, expected):
    assert ids(engine, table, pairs) == expected


ORDER_SQL_CASES = [
    ("id", ALL),
    ("id.desc", ALL[::-1]),
    ("price", [3, 1, 6, 2, 8, 7, 5, 4]),
    ("price.asc", [3, 1, 6, 2, 8, 7, 5, 4]),
    ("price.desc", [4, 5, 7, 8, 2, 6, 1, 3]),
    ("price.asc.nullsfirst", [4, 3, 1, 6, 2, 8, 7, 5]),
    ("price.nullsfirst", [4, 3, 1, 6, 2, 8, 7, 5]),
    ("price.desc.nullslast", [5, 7, 8, 2, 6, 1, 3, 4]),
    ("price.nullslast.desc", [5, 7, 8, 2, 6, 1, 3, 4]),
    ("user_id.desc,id", [5, 6, 7, 3, 4, 1, 2, 8]),
    ("user_id.nullslast,id.desc", [8, 2, 1, 4, 3, 7, 6, 5]),
    ("born.desc", [3, 7, 4, 6, 8, 1, 2, 5]),
    ("active,id", [2, 6, 8, 1, 3, 5, 7, 4]),
    ("created.desc.nullslast", [8, 7, 3, 2, 6, 1, 5, 4]),
]


@pytest.mark.parametrize(("order", "expected"), ORDER_SQL_CASES)
def test_order_on_the_database(engine, table, order, expected):
    assert ids(engine, table, [], order) == expected


@settings(max_examples=60, deadline=None, database=None)
@given(word=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30))
def test_an_escaped_word_matches_only_itself(engine, word):
    """Escape every special character of a word: like and ilike then match it, and nothing longer."""
    pattern = "".join("\\" + char if char in "\\*%_" else char for char in word)
    dialect = engine.dialect.name
    with engine.begin() as connection:
        connection.execute(words.delete())
        connection.execute(words.insert(), [{"word": word}, {"word": word + "x"}, {"word": "x" + word}])
        for op in ("like", "ilike"):
            query = sa.select(words.c.word).where(
                where_clause(parse_filters([(f"word.{op}", pattern)]), words, dialect)
            )
            assert list(connection.scalars(query)) == [word]


# ---------------------------------------------------------------------------
# SQL text: values only ever as bound parameters


def compile_mysql(clause):
    return clause.compile(dialect=mysql.dialect(), compile_kwargs={"render_postcompile": True})


def compile_sqlite(clause):
    return clause.compile(dialect=sa.create_engine("sqlite://").dialect)


@pytest.mark.parametrize(
    ("pairs", "sql", "params"),
    [
        ([("name", "eq.zzsecret")], "items.name = %s", ["zzsecret"]),
        (
            [("name", "like.*zz\\%secret_")],
            "(CAST(items.name AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin) LIKE %s",
            ["%zz\\%secret_"],
        ),
        (
            [("name", "not.like.zzsecret")],
            "(CAST(items.name AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin) NOT LIKE %s",
            ["zzsecret"],
        ),
        (
            [("name", "ilike.*ZZSECRET*")],
            "(lower(CAST(items.name AS CHAR CHARACTER SET utf8mb4)) COLLATE utf8mb4_bin) LIKE lower(%s)",
            ["%ZZSECRET%"],
        ),
        (
            [("price", "like.1*")],
            "(CAST(items.price AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin) LIKE %s",
            ["1%"],
        ),
        ([("user_id", "in.(1,2)")], "items.user_id IN (%s, %s)", [1, 2]),
        ([("user_id", "not.in.(1,2)")], "(items.user_id NOT IN (%s, %s))", [1, 2]),
        ([("id", "in.()")], "false", []),
        ([("active", "is.true")], "items.active IS true", []),
        ([("note", "not.is.null")], "items.note IS NOT NULL", []),
        ([("or", '(name.eq."zz,secret",id.gt.3)')], "items.name = %s OR items.id > %s", ["zz,secret", 3]),
        ([("not.and", "(id.gt.1,id.lt.3)")], "NOT (items.id > %s AND items.id < %s)", [1, 3]),
    ],
)
def test_mysql_sql(pairs, sql, params):
    compiled = compile_mysql(where_clause(parse_filters(pairs), items, "mysql"))
    assert str(compiled) == sql
    assert list(compiled.params.values()) == params
    assert "secret" not in str(compiled).lower()


@pytest.mark.parametrize(
    ("pairs", "sql", "params"),
    [
        ([("name", "like.*a\\*[_")], "items.name GLOB ?", ["*a[*][[]?"]),
        ([("price", "like.1*")], "CAST(items.price AS VARCHAR) GLOB ?", ["1*"]),
        ([("name", "ilike.*A\\_%]")], "lower(items.name) LIKE lower(?) ESCAPE '\\'", ["%A\\_%]"]),
    ],
)
def test_sqlite_sql(pairs, sql, params):
    compiled = compile_sqlite(where_clause(parse_filters(pairs), items, "sqlite"))
    assert str(compiled) == sql
    assert list(compiled.params.values()) == params


@pytest.mark.parametrize(
    ("order", "mysql_sql", "sqlite_sql"),
    [
        ("id.desc", "items.id DESC", "items.id DESC"),  # not nullable: no NULL placement needed
        ("price", "items.price IS NULL ASC, items.price ASC", "items.price ASC NULLS LAST"),
        ("price.nullsfirst", "items.price ASC", "items.price ASC"),
        ("price.desc", "items.price IS NULL DESC, items.price DESC", "items.price DESC NULLS FIRST"),
        ("price.desc.nullslast", "items.price DESC", "items.price DESC"),
    ],
)
def test_order_sql(order, mysql_sql, sqlite_sql):
    """PostgreSQL's NULL order: SQLite is told with NULLS FIRST/LAST, which keeps an index on the
    column usable; MySQL, which has neither, gets a leading IS NULL key."""
    for dialect, compile_, sql in (
        ("mysql", compile_mysql, mysql_sql),
        ("sqlite", compile_sqlite, sqlite_sql),
    ):
        clauses = order_clauses(parse_order(order, items), items, dialect)
        assert ", ".join(str(compile_(clause)) for clause in clauses) == sql


def test_an_order_on_an_indexed_column_walks_the_index_on_sqlite(tmp_path):
    """No temporary B-tree: the order by a nullable, indexed column reads the index in order."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/plan.db")
    items.create(engine)
    with engine.connect() as connection:
        connection.exec_driver_sql("CREATE INDEX items_price ON items (price)")
        clauses = order_clauses(parse_order("price", items), items, "sqlite")
        statement = sa.select(items.c.id).order_by(*clauses).limit(50)
        sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
        plan = " ".join(str(row) for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "TEMP B-TREE" not in plan and "items_price" in plan, plan


@pytest.mark.parametrize(("name", "text", "limit"), [("select", "id", 500), ("order", "id", 50)])
def test_select_and_order_are_bounded(name, text, limit):
    parse = parse_select if name == "select" else parse_order
    assert (
        len(parse(",".join([f"a{n}:id" if name == "select" else text for n in range(limit)]), items)) == limit
    )
    with pytest.raises(FilterError, match=f"too many items in {name}"):
        parse(",".join([text] * (limit + 1)), items)


# ---------------------------------------------------------------------------
# select= and order=

EVERY = [SelectItem(name, name) for name in items.c.keys()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, EVERY),
        ("", EVERY),
        ("*", EVERY),
        (" * ", EVERY),
        ("id,name", [SelectItem("id", "id"), SelectItem("name", "name")]),
        (" name , id ", [SelectItem("name", "name"), SelectItem("id", "id")]),
        ("label:name,id", [SelectItem("name", "label"), SelectItem("id", "id")]),
        ("label : name", [SelectItem("name", "label")]),
        ("price_1:price", [SelectItem("price", "price_1")]),
        ("*,label:name", [*EVERY, SelectItem("name", "label")]),
    ],
)
def test_parse_select(text, expected):
    assert parse_select(text, items) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nme", "column items.nme does not exist"),
        ("x:nme", "column items.nme does not exist"),
        ("id,,name", "empty item in select"),
        ("id,", "empty item in select"),
        (",", "empty item in select"),
        ("name::json", 'unknown cast "json" in select="name::json"'),
        ("n:name::", 'missing type name after "::"'),
        ("note->a->>", 'missing key after "->>" in select="note->a->>"'),
        ("nme->>a", "column items.nme does not exist"),
        ("name.sum()", "aggregate sum() is not supported here"),
        ("owner(*)", 'embedding "owner" is not supported here'),
        ("id,users!inner(name)", 'embedding "users" is not supported here'),
        ("id,(name)", 'missing table name before "(" in select: "(name)"'),
        ("id,users(name", 'unbalanced parentheses in select: "id,users(name"'),
        ("id,users(name))", "unbalanced parentheses in select"),
        ("users(name)x", "unexpected text after the closing parenthesis"),
        ("users!a!b(name)", 'invalid hint "b"'),
        ("a(b(c(d(e(id)))))", "nested too deeply (at most 4 levels)"),
        (":name", 'invalid alias "" in select item ":name"'),
        ("my label:name", 'invalid alias "my label"'),
        ("a:b:name", 'invalid alias "a:b"'),
        ('"nme"', "column items.nme does not exist"),
    ],
)
def test_parse_select_refuses(text, message):
    with pytest.raises(FilterError) as error:
        parse_select(text, items)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, []),
        ("id", [OrderItem("id")]),
        ("price.desc", [OrderItem("price", True)]),
        ("price.asc.nullslast", [OrderItem("price", False, "last")]),
        ("price.nullsfirst", [OrderItem("price", False, "first")]),
        ("price.desc.nullsfirst", [OrderItem("price", True, "first")]),
        (
            "id.desc,price.desc.nullslast, name ",
            [OrderItem("id", True), OrderItem("price", True, "last"), OrderItem("name")],
        ),
    ],
)
def test_parse_order(text, expected):
    assert parse_order(text, items) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'empty item in order ""'),
        ("id,", "empty item in order"),
        (",id", "empty item in order"),
        (".desc", 'empty item in order ".desc"'),
        ("nme", "column items.nme does not exist"),
        ("nme.desc", "column items.nme does not exist"),
        ("id.dsc", 'unknown modifier "dsc" in order "id.dsc"'),
        ("id.DESC", 'unknown modifier "DESC"'),
        ("id.desc.asc", 'unknown modifier "asc" in order "id.desc.asc"'),
        ("id.nullslast.nullsfirst", 'unknown modifier "nullsfirst"'),
        ("id.", 'unknown modifier "" in order "id."'),
        ("id..desc", 'unknown modifier ""'),
    ],
)
def test_parse_order_refuses(text, message):
    with pytest.raises(FilterError) as error:
        parse_order(text, items)
    assert message in str(error.value)


def test_order_clauses_check_their_input():
    with pytest.raises(FilterError, match="column items.nme does not exist"):
        order_clauses([OrderItem("nme")], items, "sqlite")
    with pytest.raises(FilterError, match="unknown NULL placement"):
        order_clauses([OrderItem("price", nulls="middle")], items, "sqlite")


# ---------------------------------------------------------------------------
# Whatever a client sends: a result or a FilterError, never another exception

FRAGMENTS = st.sampled_from(
    [*items.c.keys(), *OPERATORS, "not", "or", "and", "nulls", "asc", "desc", "nullsfirst", "::"]
    + list('.,()[]"\\*%_:- !é\x00')
    + ["1", "-1.5", "1e999", "x", "true", "null", "2024-01-01", "2024-01-01T10:00Z", "9" * 25]
)
TOKENS = st.lists(FRAGMENTS, max_size=14).map("".join)
CLIENT_TEXT = st.one_of(st.text(), TOKENS)
CLIENT_KEY = st.one_of(
    CLIENT_TEXT, st.sampled_from(["or", "and", "not.or", "not.and", "id", "name.in", "name"])
)


@pytest.fixture(scope="module")
def memory_engine():
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    yield engine
    engine.dispose()


@settings(max_examples=400, deadline=None, database=None)
@given(pairs=st.lists(st.tuples(CLIENT_KEY, CLIENT_TEXT), max_size=4))
def test_any_filter_is_sql_or_a_filter_error(memory_engine, pairs):
    try:
        nodes = parse_filters(pairs)
        clauses = {dialect: where_clause(nodes, items, dialect) for dialect in ("sqlite", "mysql")}
    except FilterError as error:
        assert str(error)
        return
    if clauses["sqlite"] is None:
        return
    compile_mysql(clauses["mysql"])
    with memory_engine.connect() as connection:
        connection.execute(sa.select(items.c.id).where(clauses["sqlite"])).all()


def _outcome(nodes, dialect, express):
    try:
        return build(nodes, items, dialect, named=True, express=express)
    except FilterError as error:
        return str(error)


@settings(max_examples=400, deadline=None, database=None)
@given(pairs=st.lists(st.tuples(CLIENT_KEY, CLIENT_TEXT), max_size=4))
def test_the_walk_without_expressions_finds_what_the_full_walk_does(pairs):
    """A read whose plan is cached walks its filters without building SQL: the same shape, the same
    values under the same names, and the same error, or it would run another request's plan."""
    try:
        nodes = parse_filters(pairs)
    except FilterError:
        return
    for dialect in ("sqlite", "mysql"):
        full, bare = _outcome(nodes, dialect, True), _outcome(nodes, dialect, False)
        if isinstance(full, str):
            assert bare == full
            continue
        assert (bare.clause, bare.shape, bare.values) == (None, full.shape, full.values)


@settings(max_examples=300, deadline=None, database=None)
@given(text=st.one_of(st.none(), CLIENT_TEXT))
def test_any_select_is_columns_or_a_filter_error(text):
    try:
        selected = parse_select(text, items)
    except FilterError:
        return
    assert all(item.column in items.c for item in selected)


@settings(max_examples=300, deadline=None, database=None)
@given(text=CLIENT_TEXT)
def test_any_order_is_clauses_or_a_filter_error(memory_engine, text):
    try:
        clauses = order_clauses(parse_order(text, items), items, "sqlite")
    except FilterError:
        return
    with memory_engine.connect() as connection:
        connection.execute(sa.select(items.c.id).order_by(*clauses)).all()


@pytest.mark.parametrize(
    ("name", "columns", "nearest"),
    [("nme", ["id", "name"], "name"),
     ("users", ["id", "username", "message"], None),  # 3 edits, more than half of "users"
     ("usernme", ["id", "username"], "username"),
     ("colour", ["color", "colours"], "color"),  # the first of the nearest
     ("abcdefgh", ["abcdwxyz"], None)],  # 4 edits: more than PostgreSQL's 3
)  # fmt: skip
def test_the_nearest_column_as_postgresqls_hint_names_it(name, columns, nearest):
    from query.resolve import nearest_column

    assert nearest_column(name, columns) == nearest
