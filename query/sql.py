"""SQL: a filter tree built against a table into a SQLAlchemy Core expression with bound parameters,
in one walk that also gives a prepared plan's shape and values; and ORDER BY with PostgreSQL's
NULL placement (PostgREST's Query stage). What differs per database is query/dialects.py's.

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from query import dialects, operators
from query.dialects import family
from query.operators import Operator
from query.resolve import resolve_field
from query.tree import MAX_DEPTH, Condition, FilterError, Logic, OrderItem
from values import quoted


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
    walk = _Walk(table, family(dialect), named, express)
    clauses, shape = walk.all(nodes, 1)
    clause = None if not clauses or not express else clauses[0] if len(clauses) == 1 else sa.and_(*clauses)
    return Where(clause, walk.values, shape)


def where_clause(
    nodes: Iterable[Condition | Logic], table: sa.Table, dialect: str, named: bool = False
) -> ColumnElement[bool] | None:
    """The expression of `build`, for a statement that runs once."""
    return build(nodes, table, dialect, named).clause


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
        column = resolve_field(self.table, node.column, "filter")
        operator_ = operators.lookup(node)
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

    def quantified(self, node: Condition, column: ColumnElement, operator_: Operator) -> tuple:
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


def order_clauses(
    items: Iterable[OrderItem], table: sa.Table, dialect: str, not_null: frozenset = frozenset()
) -> list[ColumnElement]:
    """ORDER BY clauses with PostgreSQL's NULL placement (last ascending, first descending).
    `not_null` names columns the rows ordered hold no NULL in (`non_null_columns`)."""
    family(dialect)
    clauses = []
    for item in items:
        column = resolve_field(table, item.column, "order")
        column = getattr(column, "element", column)  # a JSON path's expression, not its label
        clause = column.desc() if item.descending else column.asc()
        if moves_nulls(item, column, not_null):  # a column without NULLs (a primary key) needs not
            clauses += dialects.placing_nulls(clause, column, nulls_first(item), dialect)
        else:
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
