"""Query string -> filter tree -> SQLAlchemy Core expressions.

Two filter dialects, mixable in one query string: the seed's dotted ``col.op=value`` and
PostgREST's ``col=op.value`` with ``not.``, ``or=(...)`` and ``and=(...)`` trees.
``parse_query`` and ``parse_filters`` are pure syntax; names and values meet the table in
``build``, ``parse_select`` and ``parse_order``. Every value reaches SQL as a bound parameter, converted to
its column's type by values.py.

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import operator
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from values import BadValue, convert_value, is_booleanish, python_type, quoted

RESERVED = frozenset({"select", "order", "limit", "offset", "on_conflict", "columns", "or", "and", "apikey"})
MAX_DEPTH = 16
# SQLite refuses expressions nested deeper than 1000, and an AND chain counts as nesting.
MAX_CONDITIONS = 200
MAX_LIST_VALUES = 10_000

_LOGIC_KEYS = {"or": ("or", False), "and": ("and", False), "not.or": ("or", True), "not.and": ("and", True)}
_TREE_OPENERS = tuple((f"{key}(", spec) for key, spec in _LOGIC_KEYS.items())
# PostgreSQL-only operators a client may well try: each is a 400 that says why, not "unknown".
_UNSUPPORTED_OPERATORS = {
    **dict.fromkeys(("cs", "cd", "ov"), "array and range operators are PostgreSQL-only"),
    **dict.fromkeys(("sl", "sr", "nxl", "nxr", "adj"), "range operators are PostgreSQL-only"),
    **dict.fromkeys(("fts", "plfts", "phfts", "wfts"), "full-text search syntax is PostgreSQL-only"),
}
_IS_VALUES = ("null", "true", "false")
OPERATOR_NAMES = (
    "eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "match", "imatch", "in", "is", "isdistinct"
)  # fmt: skip
# The operators PostgREST takes with (any) or (all) and a list: `like(any).{a*,b*}`.
QUANTIFIABLE = frozenset({"eq", "gt", "gte", "lt", "lte", "like", "ilike", "match", "imatch"})
_OPERATOR_TOKEN = re.compile(r"([a-z]+)(?:\((any|all)\))?")
MAX_PATTERN = 200  # characters of a match/imatch regular expression
_DIALECTS = {"sqlite": "sqlite", "mysql": "mysql", "mariadb": "mysql"}


class FilterError(ValueError):
    """A malformed or unknown part of the query; str(e) is the client-facing message. `kind` says
    which: "syntax", "column" (a name the table lacks) or "value" (a value its column cannot take)."""

    def __init__(self, message: str, hint: str | None = None, kind: str = "syntax"):
        super().__init__(message)
        self.hint = hint
        self.kind = kind


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: str | tuple[str, ...]  # a tuple for "in" and a quantified operator
    negated: bool = False
    quant: str | None = None  # "any" or "all": the operator holds for any / all of the values


@dataclass(frozen=True)
class Logic:
    op: str  # "and" | "or"
    children: tuple[Condition | Logic, ...]
    negated: bool = False
    path: tuple[str, ...] = ()  # the embedded resource it filters (`posts.or=(...)`); () the table


@dataclass(frozen=True)
class SelectItem:
    """A column to return under `alias`; or, when not `plain`, a value computed from it: a JSON
    path into it, a cast, an aggregate (`column` is "*" for count()), a cast of the aggregate.
    `sql` is the expression, once resolved against a table (resolve_select)."""

    column: str
    alias: str
    path: tuple = ()
    cast: str | None = None
    aggregate: str | None = None
    aggregate_cast: str | None = None
    sql: object = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    @property
    def plain(self) -> bool:
        return not (self.path or self.cast or self.aggregate or self.aggregate_cast)


@dataclass(frozen=True)
class EmbedItem:
    """`alias:table!hint!inner(items)` or `...table(items)` in select: related rows to embed."""

    table: str
    alias: str  # the key in the parent's object, and the embed's name in filters (`alias.col=...`)
    items: tuple  # SelectItem (unresolved, "*" for all) and EmbedItem
    hint: str | None = None  # a column, constraint or junction table naming the relationship
    inner: bool = False  # keep only parents with a match
    spread: bool = False  # the columns of a to-one embed, spread into the parent


@dataclass(frozen=True)
class Embedded:
    """order=, limit= and offset= of one embedded resource (`posts.order=id.desc`)."""

    order: str | None = None
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class OrderItem:
    column: str
    descending: bool = False
    nulls: str | None = None  # None | "first" | "last"


# ---------------------------------------------------------------------------
# Parsing filters (syntax only)


def parse_filters(pairs: Iterable[tuple[str, str]]) -> list[Condition | Logic]:
    """Parse query-string pairs into filter nodes; other reserved keys are skipped. A filter on an
    embedded resource keeps its path: `posts.title=eq.x` is Condition("posts.title", ...), and
    `posts.or=(...)` a Logic whose path is ("posts",)."""
    return _parse_filters(pairs)[0]


def _parse_filters(pairs: Iterable[tuple[str, str]]) -> tuple[list[Condition | Logic], set[str], bool]:
    """parse_filters' nodes, the table's own columns they name, and whether any filters an embedded
    resource."""
    nodes: list[Condition | Logic] = []
    for key, value in pairs:
        path, _, last = key.rpartition(".")
        if key in _LOGIC_KEYS:
            nodes.append(_parse_logic_param(key, value))
        elif path and _scoped_logic(key) is not None:
            scope, logic_key = _scoped_logic(key)
            nodes.append(_parse_logic_param(logic_key, value, tuple(scope.split("."))))
        elif path and last in _EMBEDDED_PARAMETERS:
            continue  # parse_embedded's
        elif key not in RESERVED:
            nodes.append(_parse_filter_param(key, value))
    return nodes, *_measure(nodes)


_EMBEDDED_PARAMETERS = ("order", "limit", "offset")


def _scoped_logic(key: str) -> tuple[str, str] | None:
    """'posts.or' -> ('posts', 'or'); 'posts.not.and' -> ('posts', 'not.and'); else None."""
    for logic_key in sorted(_LOGIC_KEYS, key=len, reverse=True):  # "not.or" before "or"
        scope = key.removesuffix("." + logic_key)
        if scope != key and scope:
            return scope, logic_key
    return None


def parse_embedded(pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, ...], Embedded]:
    """`path.order`, `path.limit` and `path.offset` parameters, by embedded resource path."""
    found: dict[tuple[str, ...], dict] = {}
    for key, value in pairs:
        scope, dot, last = key.rpartition(".")
        if not dot or last not in _EMBEDDED_PARAMETERS or _scoped_logic(key) is not None:
            continue
        if not scope or "" in scope.split("."):
            raise FilterError(f"malformed parameter {quoted(key)}", hint='write "posts.order=id.desc"')
        if last != "order" and not re.fullmatch(r"[0-9]{1,18}", value):
            raise FilterError(f'"{key[:60]}" must be a non-negative integer, not {quoted(value)}')
        found.setdefault(tuple(scope.split(".")), {})[last] = value if last == "order" else int(value)
    return {path: Embedded(**settings) for path, settings in found.items()}


def _parse_filter_param(key: str, value: str) -> Condition:
    if not key:
        raise FilterError("empty filter name", hint='write filters as "col=eq.value"')
    where = _FilterName(key)
    dotted = _split_dotted_key(key)
    if dotted is not None:
        column, negated, op = dotted
        operand = value
    elif "." in key and not _looks_native(value):
        raise _unknown_operator(key.rpartition(".")[2], where)
    else:
        column = key
        negated, op, operand = _split_native_value(key, value)
    op, quant = operator_token(op)
    return _condition(column, op, _top_level_operand(op, quant, operand, column), negated, where, quant)


class _FilterName:
    """`filter "key"` for an error message, quoted only when a message is made of it."""

    def __init__(self, key: str):
        self.key = key

    def __str__(self) -> str:
        return f"filter {quoted(self.key)}"


def _split_dotted_key(key: str) -> tuple[str, bool, str] | None:
    """'col.op' or 'col.not.op' -> (col, negated, op); None when the key is a plain column."""
    head, dot, op = key.rpartition(".")
    if not dot or operator_token(op) is None:
        return None
    if head.endswith(".not"):
        return head[: -len(".not")], True, op
    return head, False, op


def operator_token(text: str) -> tuple[str, str | None] | None:
    """'eq' -> ('eq', None), 'like(any)' -> ('like', 'any'); None when it is no operator of ours."""
    found = _OPERATOR_TOKEN.fullmatch(text)
    if found is None or found.group(1) not in OPERATORS:
        return None
    if found.group(2) is not None and found.group(1) not in QUANTIFIABLE:
        return None
    return found.group(1), found.group(2)


def _looks_native(value: str) -> bool:
    rest = value.removeprefix("not.")
    op, dot, _ = rest.partition(".")
    return bool(dot) and operator_token(op) is not None


def _split_native_value(key: str, value: str) -> tuple[bool, str, str]:
    """'op.value' or 'not.op.value' -> (negated, op, value)."""
    negated = value.startswith("not.")
    rest = value.removeprefix("not.")
    op, dot, operand = rest.partition(".")
    if not op or op == "not":
        raise FilterError(
            f"missing operator in filter {quoted(key)}",
            hint=f'write "{key}=eq.value" or "{key}.eq=value"',
        )
    if operator_token(op) is None:
        raise _unknown_operator(op, f"filter {quoted(key)}")
    if not dot:
        raise FilterError(f'missing "." and value after operator "{op}" in filter {quoted(key)}')
    return negated, op, operand


def _top_level_operand(op: str, quant: str | None, raw: str, column: str) -> str | tuple[str, ...]:
    if op != "in" and quant is None:
        return raw
    name = op if quant is None else f"{op}({quant})"
    scanner = _Scanner(raw, f"malformed {quoted(name)} list for column {quoted(column)}")
    values = _read_list(scanner)
    scanner.skip_spaces()
    if not scanner.at_end():
        raise scanner.error("unexpected text after the list")
    return values


def _condition(
    column: str, op: str, value: str | tuple[str, ...], negated: bool, where: str, quant: str | None = None
) -> Condition:
    if not column:
        raise FilterError(f"missing column name in {where}")
    if column in RESERVED:
        raise FilterError(f'"{column}" is a reserved name, not a column, in {where}')
    if op == "is" and value.lower() not in _IS_VALUES:
        raise FilterError(
            f'invalid value {quoted(value)} for "is" in {where}', hint="use null, true or false"
        )
    for one in value if quant is not None else (value,):
        if op in ("like", "ilike"):
            _like_parts(one, where)  # validate now so a bad pattern is a syntax error
        elif op in ("match", "imatch"):
            check_pattern(one, where)
    if "->" in column or column.startswith('"'):
        parse_field(column.rpartition(".")[2] if not column.startswith('"') else column, where)
    return Condition(column, op, value, negated, quant)


def _unknown_operator(op: str, where: str) -> FilterError:
    hint = "operators: " + ", ".join(OPERATOR_NAMES)
    base = op.partition("(")[0]
    if base in _UNSUPPORTED_OPERATORS:
        why = _UNSUPPORTED_OPERATORS[base]
        return FilterError(f'operator "{base}" is not supported: {why} ({where})', hint=hint)
    if base in OPERATORS and "(" in op:
        hint = f"(any) and (all) apply to {', '.join(sorted(QUANTIFIABLE))}"
    return FilterError(f"unknown operator {quoted(op)} in {where}", hint=hint)


def _measure(nodes: Iterable[Condition | Logic]) -> tuple[set[str], bool]:
    """A 400 past MAX_CONDITIONS or MAX_LIST_VALUES; else the table's own columns the nodes name
    (not an embedded resource's), and whether any node filters an embedded resource."""
    conditions = values = 0
    names: set[str] = set()
    scoped = False
    pending = [(node, False) for node in nodes]
    while pending:
        node, embedded = pending.pop()
        if isinstance(node, Logic):
            scoped = scoped or bool(node.path)
            pending.extend((child, embedded or bool(node.path)) for child in node.children)
            continue
        # Each value of a quantified operator is one more condition in the SQL.
        conditions += max(len(node.value), 1) if node.quant is not None else 1
        values += len(node.value) if isinstance(node.value, tuple) else 1
        if not embedded and "." not in node.column:
            names.add(field_name(node.column))
        scoped = scoped or "." in node.column
    if conditions > MAX_CONDITIONS:
        raise FilterError(f"too many filter conditions (at most {MAX_CONDITIONS})")
    if values > MAX_LIST_VALUES:
        raise FilterError(f"too many filter values (at most {MAX_LIST_VALUES})")
    return names, scoped


class _Scanner:
    """A cursor over one query-string value, for lists and logic trees."""

    def __init__(self, text: str, context: str):
        self.text = text
        self.pos = 0
        self.context = context

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def startswith(self, prefix: str) -> bool:
        return self.text.startswith(prefix, self.pos)

    def take(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def skip_spaces(self) -> None:
        while self.peek().isspace():
            self.pos += 1

    def read_until(self, stops: str) -> str:
        start = self.pos
        while not self.at_end() and self.text[self.pos] not in stops:
            self.pos += 1
        return self.text[start : self.pos]

    def read_quoted(self) -> str:
        """A double-quoted value; backslash makes the next character literal (PostgREST)."""
        self.pos += 1
        chars = []
        while not self.at_end():
            char = self.text[self.pos]
            self.pos += 1
            if char == '"':
                return "".join(chars)
            if char == "\\" and not self.at_end():
                char = self.text[self.pos]
                self.pos += 1
            chars.append(char)
        raise self.error("unterminated quoted value")

    def error(self, message: str) -> FilterError:
        return FilterError(f"{self.context}: {message} (at position {self.pos + 1})")


def _read_list(scanner: _Scanner) -> tuple[str, ...]:
    """'(a,"b,c")', '[a,"b,c"]' or '{a,"b,c"}' (PostgreSQL's array literal, for (any) and (all))
    -> ('a', 'b,c'); '()' is the empty list."""
    closer = {"(": ")", "[": "]", "{": "}"}.get(scanner.peek())
    if closer is None:
        raise scanner.error('expected a list such as "(1,2)", "[1,2]" or "{1,2}"')
    scanner.pos += 1
    scanner.skip_spaces()
    if scanner.take(closer):
        return ()
    values = []
    while True:
        values.append(_read_list_value(scanner, closer))
        if scanner.take(","):
            continue
        if scanner.take(closer):
            return tuple(values)
        if scanner.at_end():
            raise scanner.error(f'missing "{closer}" at the end of the list')
        raise scanner.error(f'expected "," or "{closer}"')


def _read_list_value(scanner: _Scanner, closer: str) -> str:
    start = scanner.pos
    scanner.skip_spaces()
    if scanner.peek() == '"':
        value = scanner.read_quoted()
        scanner.skip_spaces()
        return value
    scanner.pos = start
    value = scanner.read_until("," + closer)
    if not value:
        raise scanner.error('empty list element (write "" for an empty string)')
    return value


def _parse_logic_param(key: str, value: str, path: tuple[str, ...] = ()) -> Logic:
    op, negated = _LOGIC_KEYS[key]
    scanner = _Scanner(value, f"malformed {quoted(key)} filter")
    scanner.skip_spaces()
    if scanner.peek() != "(":
        raise FilterError(
            f"malformed {quoted(key)} filter: the conditions must be in parentheses",
            hint=f'write "{key}=(a.eq.1,b.gt.2)"',
        )
    logic = Logic(op, _read_tree(scanner, key, depth=1), negated, path)
    scanner.skip_spaces()
    if scanner.peek() == ")":
        raise FilterError(f"unbalanced parentheses in {quoted(key)} filter")
    if not scanner.at_end():
        raise scanner.error("unexpected text after the closing parenthesis")
    return logic


def _read_tree(scanner: _Scanner, key: str, depth: int) -> tuple[Condition | Logic, ...]:
    """'(item,item,...)' where an item is a condition or a nested and(...)/or(...)."""
    if depth > MAX_DEPTH:
        raise FilterError(f"{quoted(key)} filter is nested too deeply (at most {MAX_DEPTH} levels)")
    scanner.pos += 1  # the "(" the caller saw
    children = []
    while True:
        scanner.skip_spaces()
        children.append(_read_tree_item(scanner, key, depth))
        scanner.skip_spaces()
        if scanner.take(","):
            continue
        if scanner.take(")"):
            return tuple(children)
        if scanner.at_end():
            raise FilterError(f"unbalanced parentheses in {quoted(key)} filter")
        raise scanner.error('expected "," or ")"')


def _read_tree_item(scanner: _Scanner, key: str, depth: int) -> Condition | Logic:
    for opener, (op, negated) in _TREE_OPENERS:
        if scanner.startswith(opener):
            scanner.pos += len(opener) - 1
            return Logic(op, _read_tree(scanner, key, depth + 1), negated)
    return _read_tree_condition(scanner, key)


def _read_tree_condition(scanner: _Scanner, key: str) -> Condition:
    """'col.op.value' or 'col.not.op.value' inside a logic tree."""
    column = scanner.read_until(".,()")
    if not column:
        raise scanner.error('expected a condition such as "col.eq.value"')
    if not scanner.take("."):
        raise scanner.error(f'expected "." and an operator after {quoted(column)}')
    negated = scanner.startswith("not.")
    if negated:
        scanner.pos += len("not.")
    op = scanner.read_until(".,()")
    for quantifier in ("(any)", "(all)"):
        if scanner.startswith(quantifier):
            op += quantifier
            scanner.pos += len(quantifier)
    token = operator_token(op)
    if token is None:
        raise _unknown_operator(op, f"{quoted(key)} filter (at position {scanner.pos + 1})")
    op, quant = token
    if not scanner.take("."):
        raise scanner.error(f'expected "." and a value after operator "{op}"')
    value = _read_list(scanner) if op == "in" or quant else _read_tree_value(scanner)
    return _condition(column, op, value, negated, f"{quoted(key)} filter", quant)


def _read_tree_value(scanner: _Scanner) -> str:
    if scanner.peek() != '"':
        return scanner.read_until(",)")
    value = scanner.read_quoted()
    scanner.skip_spaces()
    if scanner.peek() not in ("", ",", ")"):
        raise scanner.error("unexpected text after a quoted value")
    return value


# ---------------------------------------------------------------------------
# Building SQL


@dataclass(frozen=True)
class Where:
    """A filter tree built against a table in one walk: the SQL expression (None without filters),
    the values of its named parameters, and the shape, what of the filters decides the SQL
    (columns, operators, negations, and the values that change the SQL rather than a parameter:
    is.null, an empty in). A prepared plan is keyed by the shape and run with the values."""

    clause: ColumnElement[bool] | None
    values: dict[str, object]
    shape: tuple


def build(
    nodes: Iterable[Condition | Logic],
    table: sa.Table,
    dialect: str,
    named: bool = False,
    express: bool = True,
) -> Where:
    """AND of all nodes against `table`, with bound parameters. `named`: the parameters are called
    p0, p1, ... in the order of the conditions and carry no value of their own, so that the SQL can
    run again with the values of another request of the same shape; their values are `values`.
    Without `express`, the walk checks and converts everything as it would but builds no expression
    (`clause` is None): the shape and values, all a request needs whose plan is already made."""
    walk = _Walk(table, _dialect(dialect), named, express)
    clauses, shape = walk.all(nodes, 1)
    clause = None if not clauses or not express else clauses[0] if len(clauses) == 1 else sa.and_(*clauses)
    return Where(clause, walk.values, shape)


def where_clause(
    nodes: Iterable[Condition | Logic], table: sa.Table, dialect: str, named: bool = False
) -> ColumnElement[bool] | None:
    """The expression of `build`, for a statement that runs once."""
    return build(nodes, table, dialect, named).clause


def _dialect(name: str) -> str:
    try:
        return _DIALECTS[name]
    except KeyError:
        # The caller's bug, not the client's: deliberately not a FilterError.
        raise ValueError(f"unsupported SQL dialect {name!r}") from None


class _Walk:
    """One walk over a filter tree: each condition's column is resolved, its value converted and
    bound, and its part of the shape noted, at the same node, so a value can never be bound under
    another condition's name."""

    def __init__(self, table: sa.Table, dialect: str, named: bool, express: bool = True):
        self.table, self.dialect, self.named, self.express = table, dialect, named, express
        self.values: dict[str, object] = {}
        self.number = 0

    def all(self, nodes: Iterable[Condition | Logic], depth: int) -> tuple[list, tuple]:
        built = [self.node(node, depth) for node in nodes]
        return [clause for clause, _ in built], tuple(shape for _, shape in built)

    def node(self, node: Condition | Logic, depth: int) -> tuple[ColumnElement, tuple]:
        if isinstance(node, Logic):
            expression, shape = self.logic(node, depth)
        elif isinstance(node, Condition):
            expression, shape = self.condition(node)
        else:
            raise TypeError(f"not a filter node: {node!r}")
        return (sa.not_(expression) if node.negated and self.express else expression), shape

    def condition(self, node: Condition) -> tuple[ColumnElement, tuple]:
        column = _resolve_field(self.table, node.column, "filter")
        operator_ = _operator(node)
        if node.quant is not None:
            return self.quantified(node, column, operator_)
        value = operator_.convert(column, node.value, self.dialect)
        name, self.number = f"p{self.number}", self.number + 1
        if operator_.has_parameter(value):
            shape = (node.column, node.op, node.negated)
            if self.named:  # no value of its own: each execution must pass one, never a stale one
                self.values[name] = value
            if not self.express:
                return None, shape
            kind, expanding = operator_.type(column), operator_.op == "in"
            if self.named:
                value = sa.bindparam(name, type_=kind, expanding=expanding, required=True)
            else:
                value = sa.bindparam(None, value, type_=kind, expanding=expanding)
        else:  # the value is in the SQL itself: is.null, is.true, an empty in
            shape = (node.column, node.op, node.negated, repr(value))
            if not self.express:
                return None, shape
        return operator_.express(column, value, self.dialect), shape

    def quantified(self, node: Condition, column: ColumnElement, operator_: _Operator) -> tuple:
        """`op(any)` / `op(all)` over a list: the OR / AND of the operator on each value, one
        parameter each (the list's length is part of the shape). An empty list is false for any
        and true for all, as in PostgreSQL."""
        if not isinstance(node.value, tuple):
            where = f"filter {quoted(node.column)}"
            raise FilterError(f"{node.op}({node.quant}) needs a list such as {{a,b}} in {where}")
        parts = []
        for raw in node.value:
            value = operator_.convert(column, raw, self.dialect)
            name, self.number = f"p{self.number}", self.number + 1
            if self.named:
                self.values[name] = value
            if not self.express:
                continue
            if self.named:
                parameter = sa.bindparam(name, type_=operator_.type(column), required=True)
            else:
                parameter = sa.bindparam(None, value, type_=operator_.type(column))
            parts.append(operator_.express(column, parameter, self.dialect))
        shape = (node.column, node.op, node.negated, node.quant, len(node.value))
        if not self.express:
            return None, shape
        if not parts:
            return (sa.false() if node.quant == "any" else sa.true()), shape
        return (sa.or_ if node.quant == "any" else sa.and_)(*parts), shape

    def logic(self, node: Logic, depth: int) -> tuple[ColumnElement, tuple]:
        if depth > MAX_DEPTH:
            raise FilterError(f"filter is nested too deeply (at most {MAX_DEPTH} levels)")
        combine = {"and": sa.and_, "or": sa.or_}.get(node.op)
        if combine is None:
            raise FilterError(f"unknown logic operator {quoted(node.op)}")
        if not node.children:
            raise FilterError(f'empty "{node.op}" filter')
        clauses, shape = self.all(node.children, depth + 1)
        shape = (node.op, node.negated, node.path, shape)
        return (combine(*clauses) if self.express else None), shape


def _operator(node: Condition) -> _Operator:
    found = _OPERATORS.get(node.op)
    if found is None:
        raise _unknown_operator(node.op, f"filter {quoted(node.column)}")
    return found


# ---------------------------------------------------------------------------
# Fields: a column, perhaps "quoted", and a JSON path into it (`data->a->>b`, `data->0`)

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


def _read_name(text: str, pos: int, where: str) -> tuple[str, int]:
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


def _read_path(text: str, pos: int, where: str) -> tuple[tuple, int]:
    path = []
    while text.startswith("->", pos):
        arrow = "->>" if text.startswith("->>", pos) else "->"
        pos += len(arrow)
        if text.startswith('"', pos):
            key, pos = _read_name(text, pos, where)
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
    name, pos = _read_name(text, 0, where)
    path, pos = _read_path(text, pos, where)
    if pos != len(text):
        raise FilterError(f"unexpected {quoted(text[pos:])} after the column name in {where}")
    return Field(name, path)


def _is_plain(text: str) -> bool:
    return "->" not in text and not text.startswith('"')


def field_name(text: str) -> str:
    """The column a field text names (for reflection), or the text itself when it does not parse."""
    if _is_plain(text):
        return text
    try:
        return parse_field(text).name
    except FilterError:
        return text


def _resolve_field(table: sa.Table, text: str, where: str) -> ColumnElement:
    """The column `text` names, or, with a JSON path, the path's value as text (`->>`) or as JSON
    text (`->`), labelled with `text` so that messages name it."""
    if _is_plain(text):
        return _resolve_column(table, text, where)
    field = parse_field(text, where)
    column = _resolve_column(table, field.name, where)
    if not field.path:
        return column
    return _json_text(column, field.path).label(text)


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
    return f"({column} -> {path})"


@compiles(_JsonText)
def _json_text_mysql(element, compiler, **kw):
    extract = f"JSON_EXTRACT({compiler.process(element.clauses, **kw)})"
    return f"(CASE WHEN JSON_TYPE({extract}) = 'NULL' THEN NULL ELSE JSON_UNQUOTE({extract}) END)"


@compiles(_JsonText, "sqlite")
def _json_text_sqlite(element, compiler, **kw):
    column, path = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CAST(({column} ->> {path}) AS TEXT)"


@compiles(_JsonLiteral)
def _json_literal_mysql(element, compiler, **kw):
    return f"CAST(JSON_EXTRACT({compiler.process(element.clauses, **kw)}) AS CHAR CHARACTER SET utf8mb4)"


def _path_parameter(path: tuple) -> ColumnElement:
    # A bound parameter, never SQL text: a key reaches the database as a value.
    return sa.bindparam(None, _json_path(path), type_=sa.String())


def _json_text(column: ColumnElement, path: tuple) -> ColumnElement:
    kind = _JsonText if path[-1][0] == "->>" else _JsonLiteral
    return kind(column, _path_parameter(path))


def _json_output(column: ColumnElement, path: tuple) -> ColumnElement:
    """A JSON path as a select item: JSON for `->`, text for `->>`."""
    if path[-1][0] == "->>":
        return _JsonText(column, _path_parameter(path))
    return _JsonDocument(column, _path_parameter(path))


def _resolve_column(table: sa.Table, name: str, where: str) -> sa.Column:
    column = table.c.get(name)
    if column is None:
        raise FilterError(
            f"unknown column {quoted(name)} in {where}", hint=suggest(name, table), kind="column"
        )
    return column


def suggest(name: str, table: sa.Table) -> str | None:
    """A hint naming the table's column nearest to an unknown `name`, or None."""
    if len(name) > 100:
        return None
    matches = difflib.get_close_matches(name, list(table.c.keys()), n=1)
    return f'did you mean "{matches[0]}"?' if matches else None


def _one_value(value: object, column: sa.Column) -> str:
    if not isinstance(value, str):
        raise FilterError(f"expected a single value, not a list, for column {quoted(column.key)}")
    return value


@dataclass(frozen=True)
class _Operator:
    """One filter operator: `convert` checks a raw value and makes it the bound parameter's value
    (or, for "is", the word that picks the SQL); `express` builds the expression around it (a
    bindparam, or the raw value when there is no parameter)."""

    op: str
    convert: Callable[[sa.Column, object, str], object]
    express: Callable[[sa.Column, object, str], ColumnElement]
    text: bool = False  # the parameter is text (a pattern), not a value of the column's type

    def has_parameter(self, value: object) -> bool:
        return self.op != "is" and not (self.op == "in" and not value)

    def type(self, column: sa.Column) -> sa.types.TypeEngine:
        return sa.String() if self.text else column.type


def _convert_single(column: sa.Column, raw: object, dialect: str) -> object:
    return _converted(column, _one_value(raw, column))


def _converted(column: sa.Column, raw: str) -> object:
    try:
        return convert_value(column, raw)
    except BadValue as exc:
        raise FilterError(str(exc), exc.hint, kind="value") from None


def _convert_in(column: sa.Column, values: object, dialect: str) -> list:
    if not isinstance(values, tuple | list):
        raise FilterError(f'"in" needs a list of values for column {quoted(column.key)}')
    return [_converted(column, value) for value in values]


def _express_in(column: sa.Column, parameter: object, dialect: str) -> ColumnElement:
    return sa.false() if isinstance(parameter, list) else column.in_(parameter)


def _convert_is(column: sa.Column, value: object, dialect: str) -> str:
    word = _one_value(value, column).lower()
    if word not in _IS_VALUES:
        raise FilterError(f'invalid value {quoted(word)} for "is"', hint="use null, true or false")
    if word != "null" and not is_booleanish(column.type):
        raise FilterError(f'"is.{word}" needs a boolean column; {quoted(column.key)} is not one')
    return word


def _express_is(column: sa.Column, word: object, dialect: str) -> ColumnElement:
    if word == "null":
        return column.is_(None)
    return column.is_(sa.true() if word == "true" else sa.false())


def _convert_like(column: sa.Column, value: object, dialect: str) -> str:
    pattern = _one_value(value, column)
    # SQLite's LIKE ignores case; GLOB is its case-sensitive matcher, with patterns of its own.
    return _glob_pattern(pattern) if dialect == "sqlite" else _like_pattern(pattern)


def _express_like(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    text = _as_text(column, dialect)
    if dialect == "sqlite":
        return text.op("GLOB", is_comparison=True)(pattern)
    # Binary collation: case- and accent-sensitive whatever the column's own collation.
    return text.collate("utf8mb4_bin").like(pattern)


def _convert_ilike(column: sa.Column, value: object, dialect: str) -> str:
    return _like_pattern(_one_value(value, column))


def _express_ilike(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    pattern = sa.func.lower(pattern)
    lowered = sa.func.lower(_as_text(column, dialect))
    if dialect == "sqlite":
        return lowered.like(pattern, escape="\\")
    # Lower both sides, then compare binary so the column's collation cannot fold accents.
    return lowered.collate("utf8mb4_bin").like(pattern)


def _as_text(column: sa.Column, dialect: str) -> ColumnElement:
    if dialect == "mysql":
        # Also makes binary and non-string columns comparable as utf8mb4 text.
        return sa.cast(column, mysql.CHAR(charset="utf8mb4"))
    return column if python_type(column.type) is str else sa.cast(column, sa.String())


def _convert_match(column: sa.Column, value: object, dialect: str) -> str:
    pattern = check_pattern(_one_value(value, column), f"filter {quoted(column.key)}")
    return pattern


def _convert_imatch(column: sa.Column, value: object, dialect: str) -> str:
    return "(?i)" + _convert_match(column, value, dialect)


def _express_match(column: sa.Column, pattern: object, dialect: str) -> ColumnElement:
    text = _as_text(column, dialect)
    if dialect == "mysql":
        # Binary collation: case-sensitive unless the pattern says (?i), whatever the column's own.
        text = text.collate("utf8mb4_bin")
    return text.op("REGEXP", is_comparison=True)(pattern)


_NESTED_REPEAT = re.compile(r"[*+}?]\)[*+{]")


def check_pattern(pattern: str, where: str = "filter") -> str:
    """A match/imatch regular expression the databases can all run, bounded: at most MAX_PATTERN
    characters, no NUL, valid as a Python expression (SQLite runs it in Python), and no repetition
    of a repeated group such as (a+)+, the classic catastrophic backtracking."""
    if len(pattern) > MAX_PATTERN:
        raise FilterError(f"regular expression in {where} is too long (at most {MAX_PATTERN} characters)")
    if "\x00" in pattern:
        raise FilterError(f"regular expression in {where} contains a NUL character")
    if _NESTED_REPEAT.search(pattern):
        raise FilterError(
            f"regular expression {quoted(pattern)} in {where} repeats a repeated group",
            hint="nested repetition such as (a+)+ is refused: it can take exponential time",
        )
    try:
        _compiled_pattern(pattern)
    except (re.error, OverflowError, RecursionError):
        raise FilterError(f"invalid regular expression {quoted(pattern)} in {where}") from None
    return pattern


@functools.lru_cache(maxsize=256)
def _compiled_pattern(pattern: str) -> re.Pattern:
    return re.compile(pattern)


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
    return _compiled_pattern(pattern).search(str(value)) is not None


def _comparison(op: str, compare: Callable) -> _Operator:
    # Always a bindparam: SQLAlchemy refuses `column > False` with a bare Python boolean.
    return _Operator(op, _convert_single, lambda column, parameter, dialect: compare(column, parameter))


_OPERATORS: dict[str, _Operator] = {
    "eq": _comparison("eq", operator.eq),
    "neq": _comparison("neq", operator.ne),
    "gt": _comparison("gt", operator.gt),
    "gte": _comparison("gte", operator.ge),
    "lt": _comparison("lt", operator.lt),
    "lte": _comparison("lte", operator.le),
    "like": _Operator("like", _convert_like, _express_like, text=True),
    "ilike": _Operator("ilike", _convert_ilike, _express_ilike, text=True),
    "match": _Operator("match", _convert_match, _express_match, text=True),
    "imatch": _Operator("imatch", _convert_imatch, _express_match, text=True),
    "in": _Operator("in", _convert_in, _express_in),
    "is": _Operator("is", _convert_is, _express_is),
    # IS NOT on SQLite, NOT (a <=> b) on MySQL: NULL is a value like any other.
    "isdistinct": _comparison("isdistinct", lambda column, value: column.is_distinct_from(value)),
}
OPERATORS = frozenset(_OPERATORS)


# ---------------------------------------------------------------------------
# LIKE patterns: "*" and "%" match any run, "_" one character, "\" escapes the next.

_ANY = object()
_ONE = object()


def _like_parts(pattern: str, where: str = "filter") -> list[object]:
    if "\x00" in pattern:
        # SQLite's LIKE and GLOB stop at NUL, so the rest of the pattern would be ignored.
        raise FilterError(f"pattern in {where} contains a NUL character")
    parts: list[object] = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise FilterError(
                    f"pattern {quoted(pattern)} ends with an escape character in {where}",
                    hint="write \\\\ for a literal backslash",
                )
            parts.append(escaped)
        elif char in "*%":
            parts.append(_ANY)
        elif char == "_":
            parts.append(_ONE)
        else:
            parts.append(char)
    return parts


def _like_pattern(pattern: str) -> str:
    """The pattern for SQL LIKE with backslash as its escape character."""
    out = []
    for part in _like_parts(pattern):
        if part is _ANY:
            out.append("%")
        elif part is _ONE:
            out.append("_")
        else:
            out.append("\\" + part if part in "%_\\" else part)
    return "".join(out)


def _glob_pattern(pattern: str) -> str:
    """The pattern for SQLite GLOB, which has no escape character, only [x] classes."""
    out = []
    for part in _like_parts(pattern):
        if part is _ANY:
            out.append("*")
        elif part is _ONE:
            out.append("?")
        else:
            out.append(f"[{part}]" if part in "*?[]" else part)
    return "".join(out)


# ---------------------------------------------------------------------------
# select= and order=

_NAME = re.compile(r"[\w$]+")
_COMPUTED = re.compile(r'->|::|"|\.(?:count|sum|avg|min|max)\(\)|^(?:[\w$]+:)?count\(\)')
_AGGREGATE = re.compile(r"\.(count|sum|avg|min|max)\(\)")
_AGGREGATE_ITEM = re.compile(r"(?:^|[.:])(?:count|sum|avg|min|max)\(\)(?:::\w+)?$")
_CAST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
AGGREGATES = ("count", "sum", "avg", "min", "max")
MAX_SELECT_ITEMS = 500  # SQLite refuses a result of more than 2,000 columns
MAX_ORDER_ITEMS = 50
MAX_EMBED_DEPTH = 4
STAR = SelectItem("*", "*")


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
    _check_names(items)
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
        name, end = _read_name(part, 0, where)
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
        column, pos = _read_name(part, pos, where)
        path, pos = _read_path(part, pos, where)
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


class _Cast(FunctionElement):
    """CAST(expression AS type) for one of CASTS, written for each database."""

    inherit_cache = False  # the type's name is no clause: a cached statement would keep another

    def __init__(self, expression: ColumnElement, name: str):
        self.cast_name = name
        self.type = CASTS[name][2]
        super().__init__(expression)


@compiles(_Cast)
def _cast_mysql(element, compiler, **kw):
    return f"CAST({compiler.process(element.clauses, **kw)} AS {CASTS[element.cast_name][1]})"


@compiles(_Cast, "sqlite")
def _cast_sqlite(element, compiler, **kw):
    value = compiler.process(element.clauses, **kw)
    if CASTS[element.cast_name] is _INTEGER:
        # PostgreSQL rounds a number cast to an integer (as MySQL does); SQLite would truncate.
        rounded = f"CAST(ROUND({compiler.process(element.clauses, **kw)}) AS INTEGER)"
        return f"(CASE WHEN typeof({value}) = 'integer' THEN {value} ELSE {rounded} END)"
    return f"CAST({value} AS {CASTS[element.cast_name][0]})"


_AGGREGATE_TYPES = {"count": sa.BigInteger(), "avg": sa.Float(asdecimal=False)}


def _computed(item: SelectItem, table: sa.Table) -> ColumnElement:
    """The expression of a select item that is not a plain column."""
    if item.column == "*":
        expression = sa.func.count()
    else:
        expression = _resolve_column(table, item.column, "select")
        if item.path:
            expression = _json_output(expression, item.path)
        if item.cast:
            expression = _Cast(expression, item.cast)
        if item.aggregate:
            function = getattr(sa.func, item.aggregate)
            kind = _AGGREGATE_TYPES.get(item.aggregate, expression.type)
            expression = function(expression, type_=kind)
    if item.aggregate_cast:
        expression = _Cast(expression, item.aggregate_cast)
    return expression


def output(item: SelectItem, table: sa.Table) -> ColumnElement:
    """What a resolved select item reads: its column, or the expression computed from it."""
    return table.c[item.column] if item.sql is None else item.sql


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


def _check_names(items: Iterable[SelectItem | EmbedItem]) -> None:
    """Each object's keys once: two items of one level may not share an alias."""
    seen = set()
    for item in items:
        if isinstance(item, EmbedItem):
            _check_names(item.items)
            if item.spread:
                continue
        if item.alias in seen and item is not STAR:
            raise FilterError(f"duplicate name {quoted(item.alias)} in select")
        seen.add(item.alias)


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
            found.append(SelectItem(_resolve_column(table, item.column, "select").key, item.alias))
        else:
            if item.aggregate and not aggregates:
                raise FilterError(
                    f"aggregate {item.aggregate}() is not supported here",
                    hint="aggregates apply to a table's own read, without embedded resources",
                )
            found.append(dataclasses.replace(item, sql=_computed(item, table)))
    seen = set()
    for item in found:
        if item.alias in seen:
            raise FilterError(f"duplicate name {quoted(item.alias)} in select")
        seen.add(item.alias)
    return found


def _all_columns(table: sa.Table) -> list[SelectItem]:
    return [SelectItem(column.key, column.key) for column in table.c]


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


_DIRECTIONS = {"asc": False, "desc": True}
NULLS_ORDER_SUPPORTED = sqlite3.sqlite_version_info >= (3, 30, 0)
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
    if _is_plain(part):
        name, *modifiers = (piece.strip() for piece in part.split("."))
    else:  # a quoted name or a JSON path: the field first, then its modifiers
        name, pos = _read_name(part, 0, f"order {quoted(part)}")
        pos = _read_path(part, pos, f"order {quoted(part)}")[1]
        name, rest = part[:pos], part[pos:].strip()
        if rest and not rest.startswith("."):
            raise FilterError(f"unexpected {quoted(rest)} in order {quoted(part)}")
        modifiers = [piece.strip() for piece in rest.split(".")[1:]]
    if not name:
        raise FilterError(f"empty item in order {quoted(part)}", hint='write "order=col.desc"')
    column = _resolve_field(table, name, "order")
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
    return OrderItem(column.key if _is_plain(name) else name, bool(descending), nulls)


def order_clauses(
    items: Iterable[OrderItem], table: sa.Table, dialect: str, not_null: frozenset = frozenset()
) -> list[ColumnElement]:
    """ORDER BY clauses with PostgreSQL's NULL placement (last ascending, first descending).
    `not_null` names columns the rows ordered hold no NULL in (`non_null_columns`)."""
    _dialect(dialect)
    clauses = []
    for item in items:
        column = _resolve_field(table, item.column, "order")
        column = getattr(column, "element", column)  # a JSON path's expression, not its label
        # MySQL and SQLite sort NULL as the smallest value. SQLite (3.30 and later) is told where
        # NULLs go, which keeps an index on the column usable; MySQL has no NULLS FIRST/LAST, so a
        # leading IS NULL key moves them. A column without NULLs (a primary key) needs neither.
        clause = column.desc() if item.descending else column.asc()
        if moves_nulls(item, column, not_null):
            if dialect == "sqlite" and NULLS_ORDER_SUPPORTED:
                clause = clause.nulls_first() if nulls_first(item) else clause.nulls_last()
            else:
                is_null = column.is_(None)
                clauses.append(is_null.desc() if nulls_first(item) else is_null.asc())
        clauses.append(clause)
    return clauses


def nulls_first(item: OrderItem) -> bool:
    """Whether `item` puts NULLs first: asked for, or by default when descending."""
    nulls = item.nulls or ("first" if item.descending else "last")
    if nulls not in ("first", "last"):
        raise FilterError(f"unknown NULL placement {quoted(str(nulls))} in order")
    return nulls == "first"


def moves_nulls(item: OrderItem, column: ColumnElement, not_null: frozenset = frozenset()) -> bool:
    """Whether ordering by `item` must put NULLs elsewhere than MySQL and SQLite do (first
    ascending, last descending): the column may hold NULL (a function's result may) and they go
    the other way."""
    nullable = getattr(column, "nullable", True) and getattr(column, "key", None) not in not_null
    return nullable and nulls_first(item) == item.descending


# A condition with one of these operators and a bound value is never true for a NULL.
_REJECTS_NULL = frozenset({"eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "in"})


def non_null_columns(shape: tuple) -> frozenset[str]:
    """The columns a filter of `shape` (Where.shape) leaves no NULL in: those of its top-level
    conditions that are not negated and compare with a bound value (not is.null, not an or=)."""
    return frozenset(part[0] for part in shape if len(part) == 3 and part[1] in _REJECTS_NULL and not part[2])


# ---------------------------------------------------------------------------
# A request's query string, parsed whole


@dataclass(frozen=True)
class Query:
    """What a request asks of a table before the table is known: filter nodes (an embedded
    resource's among them, with their path), the select tree, raw order, the order and paging of
    embedded resources by path, and `names`, the table's own columns it uses: when the reflected
    table lacks one, it is reflected again. `scoped`: a filter names an embedded resource; `plain`:
    nothing of it concerns another table (no embed, no embedded filter or paging)."""

    filters: list
    select: str | None = None
    order: str | None = None
    tree: tuple = (STAR,)
    embedded: dict = dataclasses.field(default_factory=dict)
    names: frozenset = frozenset()
    scoped: bool = False
    plain: bool = True

    def embeds(self) -> bool:
        return any(isinstance(item, EmbedItem) for item in self.tree)

    def aggregates(self) -> bool:
        return any(isinstance(item, SelectItem) and item.aggregate for item in self.tree)

    def computed(self) -> bool:
        """Whether a select item is more than a column: a JSON path, a cast or an aggregate."""
        return any(isinstance(item, SelectItem) and not item.plain for item in self.tree)

    def embeds_only(self) -> Query:
        """This query without the table's own filters: what shapes the embeds of a write's rows."""
        return dataclasses.replace(self, filters=[])


def _order_field(part: str) -> str:
    """An order item's field text, without its modifiers (a JSON path's keys hold no dot)."""
    part = part.strip()
    if part.startswith('"'):
        end = part.find('"', 1)
        return part if end < 0 else part[: end + 1] + part[end + 1 :].split(".")[0]
    return part.split(".")[0].strip()


def parse_query(
    pairs: Iterable[tuple[str, str]], select: str | None = None, order: str | None = None
) -> Query:
    """The Query of a query string's (key, value) pairs, its select= and its order=."""
    pairs = list(pairs)
    nodes, names, scoped = _parse_filters(pairs)
    tree = parse_select_tree(select)
    embedded = parse_embedded(pairs)
    names |= {item.column for item in tree if isinstance(item, SelectItem)}
    names |= {field_name(_order_field(part)) for part in (order or "").split(",")}
    embeds = any(isinstance(item, EmbedItem) for item in tree)
    plain = not (embeds or embedded or scoped)
    return Query(nodes, select, order, tree, embedded, frozenset(names - {"", "*"}), scoped, plain)
