"""The filter operators: for each, how a raw value is checked and converted to its bound parameter's
value, and the SQL expression around that parameter.

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from query import dialects
from query.dialects import ilike, like, match
from query.patterns import check_pattern, like_pattern
from query.tree import IS_VALUES, Condition, FilterError, unknown_operator
from values import BadValue, convert_value, is_booleanish, quoted


def _one_value(value: object, column: sa.Column) -> str:
    if not isinstance(value, str):
        raise FilterError(f"expected a single value, not a list, for column {quoted(column.key)}")
    return value


@dataclass(frozen=True)
class Operator:
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
    if word not in IS_VALUES:
        raise FilterError(f'invalid value {quoted(word)} for "is"', hint="use null, true or false")
    if word != "null" and not is_booleanish(column.type):
        raise FilterError(f'"is.{word}" needs a boolean column; {quoted(column.key)} is not one')
    return word


def _express_is(column: sa.Column, word: object, dialect: str) -> ColumnElement:
    if word == "null":
        return column.is_(None)
    return column.is_(sa.true() if word == "true" else sa.false())


def _convert_like(column: sa.Column, value: object, dialect: str) -> str:
    return dialects.case_sensitive_pattern(_one_value(value, column), dialect)


def _convert_ilike(column: sa.Column, value: object, dialect: str) -> str:
    return like_pattern(_one_value(value, column))


def _convert_match(column: sa.Column, value: object, dialect: str) -> str:
    pattern = check_pattern(_one_value(value, column), f"filter {quoted(column.key)}")
    return pattern


def _convert_imatch(column: sa.Column, value: object, dialect: str) -> str:
    return "(?i)" + _convert_match(column, value, dialect)


def _comparison(op: str, compare: Callable) -> Operator:
    # Always a bindparam: SQLAlchemy refuses `column > False` with a bare Python boolean.
    return Operator(op, _convert_single, lambda column, parameter, dialect: compare(column, parameter))


REGISTRY: dict[str, Operator] = {
    "eq": _comparison("eq", operator.eq),
    "neq": _comparison("neq", operator.ne),
    "gt": _comparison("gt", operator.gt),
    "gte": _comparison("gte", operator.ge),
    "lt": _comparison("lt", operator.lt),
    "lte": _comparison("lte", operator.le),
    "like": Operator("like", _convert_like, like, text=True),
    "ilike": Operator("ilike", _convert_ilike, ilike, text=True),
    "match": Operator("match", _convert_match, match, text=True),
    "imatch": Operator("imatch", _convert_imatch, match, text=True),
    "in": Operator("in", _convert_in, _express_in),
    "is": Operator("is", _convert_is, _express_is),
    # IS NOT on SQLite, NOT (a <=> b) on MySQL: NULL is a value like any other.
    "isdistinct": _comparison("isdistinct", lambda column, value: column.is_distinct_from(value)),
}


def lookup(node: Condition) -> Operator:
    found = REGISTRY.get(node.op)
    if found is None:
        raise unknown_operator(node.op, f"filter {quoted(node.column)}")
    return found
