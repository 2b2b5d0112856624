"""Aggregates through to-one spreads, as PostgREST computes them: when a level aggregates, its
to-one spreads' columns become its own, read through a LEFT JOIN, so that its rows group by them
and an aggregate in a spread counts the level's rows (`...owner(count())`,
`channels(count(), ...channel_details(details))`, `...processes(...process_costs(cost.sum()))`).

Each spread joins as a subquery of its table under its own WHERE (its grant, row policy and
filters): the policy's SQL names columns without their table, and inside the subquery it reads
them from its own table only."""

import dataclasses

import sqlalchemy as sa
from sqlalchemy.sql.util import ClauseAdapter

from errors import APIError, Rest
from query.tree import EmbedItem, SelectItem


def aggregated(items):
    """Whether a select level's items (unresolved) aggregate through a spread: a spread among them,
    and an aggregate in them or in a spread's items."""
    spreads = [item for item in items if isinstance(item, EmbedItem) and item.spread]
    return bool(spreads) and _aggregates(items)


def _aggregates(items):
    for item in items:
        if isinstance(item, SelectItem) and item.aggregate:
            return True
        if isinstance(item, EmbedItem) and item.spread and _aggregates(item.items):
            return True
    return False


def refuse_to_many():
    """PostgREST's 400 for aggregates in a spread of many rows."""
    return APIError(
        400,
        Rest.NOT_IMPLEMENTED,
        "Feature not implemented",
        details="Aggregates are not implemented for one-to-many or many-to-many spreads.",
    )


def hoisted(table, outputs, joins, spreads):
    """`outputs` of a level on `table` with each to-one spread (and the spreads in it) replaced by
    its select items, their expressions on a subquery of its rows that `joins` gets with its ON;
    `spreads` gets the Childs replaced, whose grants each request still authorizes and binds."""
    flat = []
    for output in outputs:
        spread = getattr(output, "spread", False)
        relationship = getattr(output, "relationship", None)
        if not spread or relationship.many or output.junction is not None or not output.shown:
            flat.append(output)
            continue
        level = output.level
        spreads.append(output)
        rows = sa.select(level.table)
        if level.where is not None:
            rows = rows.where(level.where)
        sub = rows.subquery(f"h{len(joins)}_{level.table.name}"[:60])
        adapt = ClauseAdapter(sub).traverse
        pairs = zip(relationship.parent_columns, relationship.child_columns, strict=True)
        joins.append((sub, sa.and_(*(sub.c[child] == table.c[parent] for parent, child in pairs))))
        start = len(joins)
        joins += level.joins  # the spreads it aggregates over itself, already its columns
        inner = hoisted(level.table, level.outputs, joins, spreads)
        joins[start:] = [(joined, adapt(on)) for joined, on in joins[start:]]
        matched = sub.c[relationship.child_columns[0]]
        for item in inner:
            if not isinstance(item, SelectItem):
                flat.append(item)
            elif item.aggregate == "count" and item.column == "*" and item.aggregate_cast is None:
                flat.append(dataclasses.replace(item, sql=sa.func.count(matched)))
            else:
                expression = item.sql if item.sql is not None else level.table.c[item.column]
                flat.append(dataclasses.replace(item, sql=adapt(expression)))
    return flat
