"""The prepared plans of plain reads, kept with the cache of tables (rest/reflection.py): each
shape of read is compiled once, its values (the owner's id among them) passed as parameters by each
request; a table reflected again gets new plans. A plan without an `in` list runs straight on a
DBAPI connection in autocommit mode through `statements.prepared`."""

from dataclasses import dataclass

import sqlalchemy as sa

from database import statements
from encoding import row_shape
from extensions import db, state
from query import resolve, sql
from rest.reflection import dialect, order_items


@dataclass(frozen=True)
class Plan:
    """A read's statements, prepared once for every request of its shape: the page's SELECT and the
    count under the same WHERE, with the filters' values, the owner's id and the paging as named
    parameters that each request passes (`read_plan`), and the select items the rows are shaped by.
    `prepared` holds both statements compiled for the DBAPI (database.statements.prepare), or None
    when their SQL depends on the values (an `in` list): those run through SQLAlchemy."""

    rows: object
    count: object
    items: list
    shape: tuple  # encoding.row_shape of the items
    prepared: tuple | None = None
    first: object = None  # a page in two parts: the first part alone, prepared (`_first_part`)


MAX_PLANS = 256


def read_plan(table, query, grant, offset, limit):
    """The Plan of a read, from the cache, and this request's parameters for it. A plan is keyed by
    everything that decides its SQL: the table as reflected (so a table reflected again gets new
    plans), the filters' shape, select, order, whether there is an offset and a limit, and the
    grant's rule, whether it keeps an owner to their rows and whether its row policy applies (the
    policy's SQL is the table's, from tables.toml); values, the owner's id and the policy's
    parameters included, are parameters and never part of the plan. The filters' values and shape
    come from one walk (sql.build), so a value is bound under its own condition's name or not at
    all; their SQL expression is built only when the plan is made. That walk is kept per table as
    reflected and filters (`walked`)."""
    cache = state().schema
    where = walked(cache, table, query.filters)
    key = (table, where.shape, query.select, query.order, bool(offset), limit is not None,
           grant.policy.rules["select"], grant.owner_id is not None, grant.using is not None)  # fmt: skip
    values = {**where.values, **grant.plan_values()}
    if offset:
        values["offset"] = offset
    if limit is not None:
        values["limit"], values["span"] = limit, offset + limit
    plans = cache.plans
    found = plans.get(key)
    with cache.lock:
        if found is None:
            where = sql.build(query.filters, table, db.engine.dialect.name, named=True)
            found = plans[key] = _plan(table, query, grant, offset, limit, where)
            while len(plans) > MAX_PLANS:
                plans.popitem(last=False)
        elif key in plans:
            plans.move_to_end(key)
    return found, values


MAX_WALKS = 1024


def walked(cache, table, filters):
    """The shape and values (sql.Where, no expression) of `filters` on `table`, from the cache: a
    pure function of the two, since the table as reflected (a new object when reflected again) says
    each column's type, and the filters hold every value. A walk that fails raises every time."""
    key = (table, filters)
    found = cache.walks.get(key)
    if found is None:
        found = sql.build(filters, table, db.engine.dialect.name, named=True, express=False)
        if len(cache.walks) >= MAX_WALKS:
            cache.walks.clear()
        cache.walks[key] = found
    return found


def _plan(table, query, grant, offset, limit, where):
    items = resolve.parse_select(query.select, table, aggregates=True)
    allowed = grant.condition(table, named=True)
    not_null = sql.non_null_columns(where.shape)
    where = where.clause
    if allowed is not None:
        where = allowed if where is None else sa.and_(where, allowed)
    columns = [resolve.output(item, table).label(f"c{index}") for index, item in enumerate(items)]
    count = sa.select(sa.func.count()).select_from(table)
    if where is not None:
        count = count.where(where)
    order = None if query.aggregates() else order_items(query.order, table)
    first = None
    if order is not None and limit is not None and _nulls_apart(order, table, not_null):
        rows = _page_in_two_parts(columns, where, order, table, not_null)
        first = _first_part(columns, where, order, table, not_null)
    else:
        rows = sa.select(*columns).select_from(table)
        if where is not None:
            rows = rows.where(where)
        if order is None:
            rows, count = _grouped(rows, items, columns, query.order, table)
        else:
            rows = rows.order_by(*sql.order_clauses(order, table, dialect(), not_null))

    def paged(statement):
        if offset:
            statement = statement.offset(sa.bindparam("offset", type_=sa.Integer, required=True))
        if limit is not None:
            statement = statement.limit(sa.bindparam("limit", type_=sa.Integer, required=True))
        return statement

    rows = paged(rows)
    compiled = [statements.prepare(statement, db.engine, named=False) for statement in (rows, count)]
    if not all(compiled):
        return Plan(rows, count, items, row_shape(table, items))
    first = None if first is None else statements.prepare(paged(first), db.engine, named=False)
    return Plan(rows, count, items, row_shape(table, items), tuple(compiled), first)


def _grouped(rows, items, columns, order, table):
    """An aggregate read, as PostgREST makes it: grouped by the select items that are not
    aggregates (by their labels, so a JSON path's parameter is not compared with itself), in the
    order asked or else the groups' own, counted as groups. The table's own ORDER BY on its key
    would not be one of the groups'."""
    groups = [
        sa.literal_column(column.name)
        for item, column in zip(items, columns, strict=True)
        if not item.aggregate
    ]
    rows = rows.group_by(*groups)
    count = sa.select(sa.func.count()).select_from(rows.subquery("groups"))
    asked = sql.order_clauses(resolve.parse_order(order, table), table, dialect()) if order else groups
    return rows.order_by(*asked), count


def _nulls_apart(order, table, not_null):
    """Whether a page is read in two parts (`_page_in_two_parts`): on MySQL, when the first order
    column is the only one whose NULLs must move."""
    if dialect() != "mysql" or any(item.column not in table.c for item in order):
        return False  # a JSON path or a function's column: one SELECT with its IS NULL key
    moved = [sql.moves_nulls(item, table.c[item.column], not_null) for item in order]
    return moved[:1] == [True] and not any(moved[1:])


def _page_in_two_parts(columns, where, order, table, not_null):
    """A page's SELECT, offset and limit to come, as the rows where the first order column is NULL
    and the others, each in an order an index on that column gives and cut at offset + limit rows
    (`span`), then those rows in order. MySQL has no NULLS FIRST/LAST: in one SELECT, the NULLs
    move by a leading `col IS NULL` key that no index has, so MySQL sorts every row that matches
    (a filesort) to find the page; here it reads about offset + limit rows of the index."""
    first, rest = order[0], order[1:]
    column = table.c[first.column]
    span = sa.bindparam("span", type_=sa.Integer, required=True)
    keys = [table.c[item.column].label(f"o{number}") for number, item in enumerate(order)]

    def part(number, condition, ordered, known):
        kept = condition if where is None else sa.and_(where, condition)
        found = sa.select(*columns, *keys, sa.literal_column(str(number)).label("part")).where(kept)
        return found.order_by(*sql.order_clauses(ordered, table, "mysql", known)).limit(span)

    nulls_first = sql.nulls_first(first)
    nulls = part(0 if nulls_first else 1, column.is_(None), rest, not_null)
    others = part(1 if nulls_first else 0, column.is_not(None), order, not_null | {column.key})
    pages = sa.union_all(nulls, others).subquery("page")
    # Within a part the first column is all NULL or none, and no other column's NULLs move.
    keys = [pages.c[f"o{n}"] for n in range(len(order))]
    by = [key.desc() if item.descending else key.asc() for key, item in zip(keys, order, strict=True)]
    return sa.select(*[pages.c[c.name] for c in columns]).order_by(pages.c.part, *by)


def _first_part(columns, where, order, table, not_null):
    """The part of a page in two parts that comes first in its order (the rows where the first
    order column is not NULL when its NULLs go last, else the NULL ones), in order, offset and limit
    to come: when it fills the page, it is the page, read by one ordered SELECT on the column's
    index, without the UNION, its derived table and its sort (on MariaDB, 370 µs of the server's
    CPU for the bench's 50-row list against 550)."""
    first = order[0]
    column = table.c[first.column]
    if sql.nulls_first(first):
        kept, ordered, known = column.is_(None), order[1:], not_null
    else:
        kept, ordered, known = column.is_not(None), order, not_null | {column.key}
    kept = kept if where is None else sa.and_(where, kept)
    return sa.select(*columns).where(kept).order_by(*sql.order_clauses(ordered, table, "mysql", known))


def run_plan(plan, values, rows=True, count=False):
    """A plan's page of rows (None when not asked) and its count (None when not asked), in one
    transaction."""
    if plan.prepared is None:
        connection = db.session.connection()
        found = connection.execute(plan.rows, values).all() if rows else None
        return found, connection.execute(plan.count, values).scalar() if count else None
    if rows and plan.first is not None:  # a page in two parts, of which the first may be enough
        results = statements.prepared(values, plan.first, *plan.prepared[1:] if count else ())
        total = results[1][0][0] if count else None
        if len(results[0]) == values["limit"]:
            return results[0], total
        return statements.prepared(values, plan.prepared[0])[0], total
    asked = [statement for statement, wanted in zip(plan.prepared, (rows, count), strict=True) if wanted]
    results = iter(statements.prepared(values, *asked))
    found = next(results) if rows else None
    return found, next(results)[0][0] if count else None
