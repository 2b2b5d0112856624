"""The typed request: the filter tree's nodes (Condition, Logic), the items of select= (SelectItem,
EmbedItem) and order= (OrderItem), the paging of an embedded resource (Embedded), and FilterError,
the one error of the query package: str(e) is the client-facing message.

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from values import quoted

RESERVED = frozenset({"select", "order", "limit", "offset", "on_conflict", "columns", "or", "and", "apikey"})


MAX_DEPTH = 16


# PostgreSQL-only operators a client may well try: each is a 400 that says why, not "unknown".
_UNSUPPORTED_OPERATORS = {
    **dict.fromkeys(("cs", "cd", "ov"), "array and range operators are PostgreSQL-only"),
    **dict.fromkeys(("sl", "sr", "nxl", "nxr", "adj"), "range operators are PostgreSQL-only"),
    **dict.fromkeys(("fts", "plfts", "phfts", "wfts"), "full-text search syntax is PostgreSQL-only"),
}


IS_VALUES = ("null", "true", "false")


OPERATOR_NAMES = (
    "eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "match", "imatch", "in", "is", "isdistinct"
)  # fmt: skip


# The operators of query/operators.py's registry.
OPERATORS = frozenset(OPERATOR_NAMES)


# The operators PostgREST takes with (any) or (all) and a list: `like(any).{a*,b*}`.
QUANTIFIABLE = frozenset({"eq", "gt", "gte", "lt", "lte", "like", "ilike", "match", "imatch"})


class FilterError(ValueError):
    """A malformed or unknown part of the query; str(e) is the client-facing message. `kind` says
    which: "syntax", "column" (a name the table lacks), "value" (a value its column cannot take) or
    "operator" (an operator its column's type lacks, PostgreSQL's 42883: a JSON path into text)."""

    def __init__(self, message: str, hint: str | None = None, kind: str = "syntax"):
        super().__init__(message)
        self.hint = hint
        self.kind = kind


def unknown_operator(op: str, where: str) -> FilterError:
    hint = "operators: " + ", ".join(OPERATOR_NAMES)
    base = op.partition("(")[0]
    if base in _UNSUPPORTED_OPERATORS:
        why = _UNSUPPORTED_OPERATORS[base]
        return FilterError(f'operator "{base}" is not supported: {why} ({where})', hint=hint)
    if base in OPERATORS and "(" in op:
        hint = f"(any) and (all) apply to {', '.join(sorted(QUANTIFIABLE))}"
    return FilterError(f"unknown operator {quoted(op)} in {where}", hint=hint)


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


STAR = SelectItem("*", "*")


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
