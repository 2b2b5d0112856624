"""Filters, syntax only: query-string pairs into the filter tree (query/tree.py). Two filter dialects,
mixable in one query string: the seed's dotted ``col.op=value`` and PostgREST's ``col=op.value``
with ``not.``, ``or=(...)`` and ``and=(...)`` trees; and the order and paging of embedded
resources (``posts.order=id.desc``).

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from query.fields import field_name, parse_field
from query.patterns import check_pattern, like_parts
from query.tree import (
    IS_VALUES,
    MAX_DEPTH,
    OPERATORS,
    QUANTIFIABLE,
    RESERVED,
    Condition,
    Embedded,
    FilterError,
    Logic,
    unknown_operator,
)
from values import quoted

# SQLite refuses expressions nested deeper than 1000, and an AND chain counts as nesting.
MAX_CONDITIONS = 200
MAX_LIST_VALUES = 10_000


_LOGIC_KEYS = {"or": ("or", False), "and": ("and", False), "not.or": ("or", True), "not.and": ("and", True)}


_TREE_OPENERS = tuple((f"{key}(", spec) for key, spec in _LOGIC_KEYS.items())


_OPERATOR_TOKEN = re.compile(r"([a-z]+)(?:\((any|all)\))?")


def parse_filters(pairs: Iterable[tuple[str, str]]) -> list[Condition | Logic]:
    """Parse query-string pairs into filter nodes; other reserved keys are skipped. A filter on an
    embedded resource keeps its path: `posts.title=eq.x` is Condition("posts.title", ...), and
    `posts.or=(...)` a Logic whose path is ("posts",)."""
    return filters_and_names(pairs)[0]


def filters_and_names(pairs: Iterable[tuple[str, str]]) -> tuple[list[Condition | Logic], set[str], bool]:
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
        raise unknown_operator(key.rpartition(".")[2], where)
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
        raise unknown_operator(op, f"filter {quoted(key)}")
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
    if op == "is" and value.lower() not in IS_VALUES:
        raise FilterError(
            f'invalid value {quoted(value)} for "is" in {where}', hint="use null, true or false"
        )
    for one in value if quant is not None else (value,):
        if op in ("like", "ilike"):
            like_parts(one, where)  # validate now so a bad pattern is a syntax error
        elif op in ("match", "imatch"):
            check_pattern(one, where)
    if "->" in column or column.startswith('"'):
        parse_field(column.rpartition(".")[2] if not column.startswith('"') else column, where)
    return Condition(column, op, value, negated, quant)


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
        raise unknown_operator(op, f"{quoted(key)} filter (at position {scanner.pos + 1})")
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
