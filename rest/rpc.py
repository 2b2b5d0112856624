"""/rest/v1/rpc/{name}: the named SQL functions of tables.toml, called like PostgREST's.

Every :name of a function's SQL is a bound parameter, filled from the call's arguments (`uid` is
the caller's user id, NULL for the API keys). A function without `writes = true` runs in a
read-only transaction (SQLite's query_only, MySQL's READ ONLY transaction) and a change it tries
is refused with nothing changed. A `rows` result is shaped as a table's rows are: its statement is
wrapped as a subquery that select, filters, order, paging and counting apply to, with column types
taken from the first row so that filter values compare as they would on a table."""

import dataclasses
import datetime
import decimal
import json
import logging

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from database import failures, transactions
from encoding import json_rows, json_value, row_shape
from errors import APIError, Rest
from extensions import db
from query import resolve, select, tree
from rest import policies, reads, reflection, rows
from values import BadValue

log = logging.getLogger("minibase")

UID = "uid"
# The request's headers as a JSON object, names in lower case: PostgREST's request.headers setting.
HEADERS = "request_headers"
BOUND = frozenset({UID, HEADERS})  # the :names the server fills, never the caller
NO_RESULT = object()  # a statement that returns no rows: the call answers 204
# Python types of a first row's values, and the column types that make filters compare alike.
TYPES = (
    (bool, sa.Boolean),
    (int, sa.BigInteger),
    (float, sa.Float),
    (decimal.Decimal, sa.Numeric),
    (datetime.datetime, sa.DateTime),
    (datetime.date, sa.Date),
    (datetime.time, sa.Time),
    (str, sa.Text),
)
MYSQL_READ_ONLY = 1792  # "Cannot execute statement in a READ ONLY transaction"
NAME_SIMILARITY = 0.75  # PostgREST's least score for a hint naming another function
PARAMS_SIMILARITY = 0.33  # and for one naming a function's arguments


def arguments(function, given, who, post, headers=()):
    """The bound values: each :name from `given` (`uid` from the caller, `request_headers` the
    request's `headers` as JSON), or its default. A JSON object or array is bound as JSON text (the
    database's JSON functions read it). Arguments that are not the function's, or leave out one
    without a default, are a 400 PGRST202 in PostgREST's words (`post`: the arguments came as a
    POST's JSON body)."""
    keys = set(given)
    taken = set(function.params) - BOUND
    if not (taken - set(function.defaults) <= keys <= taken):
        raise not_found(function.name, keys, post, function)
    values = {}
    for name in function.params:
        if name == UID:
            values[name] = who.user_id
        elif name == HEADERS:
            values[name] = json.dumps({header.lower(): value for header, value in headers})
        else:
            value = given[name] if name in given else function.defaults[name]
            values[name] = json.dumps(value) if isinstance(value, dict | list) else value
    return values


def not_found(name, keys, post, function=None):
    """PGRST202 in PostgREST's words for a call no function takes: function `name` with arguments
    `keys` (PostgREST lists them sorted). A 404 when no function has that name; a 400 when the
    function exists and the arguments are not its own (the mistake is the request's, and it is
    named), where PostgREST, which can overload a name, answers 404. The hint is the nearest
    function's name when there is none of that name, else the function's own arguments when they
    are near enough to the ones given."""
    keys = sorted(key[:100] for key in keys)
    qualified, listed = f"public.{name[:100]}", ", ".join(keys)
    searched = f" with parameter{'s' if len(keys) > 1 else ''} {listed}" if keys else " without parameters"
    if post:
        searched += " or with a single unnamed json/jsonb parameter"
    hint = None
    if function is None:
        scored = [(similarity(name, known), known) for known in policies.functions()]
        best = max(scored, default=(0, None))
        if best[0] >= NAME_SIMILARITY:
            hint = f"Perhaps you meant to call the function public.{best[1]}"
    else:
        taken = "(" + ", ".join(sorted(p for p in function.params if p not in BOUND)) + ")"
        if similarity(f"({listed})", taken) >= PARAMS_SIMILARITY:
            hint = f"Perhaps you meant to call the function {qualified}{taken}"
    return APIError(
        404 if function is None else 400,
        Rest.FUNCTION_NOT_FOUND,
        f"Could not find the function {qualified}{f'({listed})' if keys else ' without parameters'} "
        "in the schema cache",
        details=f"Searched for the function {qualified}{searched}, but no matches were found in the schema "
        "cache.",
        hint=hint,
    )


def similarity(a, b):
    """1 - the Levenshtein distance of `a` and `b` over the longer's length, case-insensitively: the
    score of PostgREST's fuzzy hints."""
    a, b = a.lower()[:200], b.lower()[:200]
    return 1 - resolve.distance(a, b) / max(len(a), len(b)) if a or b else 1.0


def call(function, values, read, who, rollback=False, max_affected=None):
    """Run `function` with `values` in one transaction (rolled back at its end with `rollback`); a
    rows.Page (a `rows` function shaped by `read`), for `one` and `scalar` the JSON value to answer
    with, or NO_RESULT for a `void` function or a statement that returns no rows at all (an INSERT,
    an UPDATE): a 204. A function of a table's rows reads them as a read of that table by `who`.
    `max_affected` (Prefer: handling=strict, max-affected=N): a function of rows that returns more
    refuses, its transaction rolled back, as PostgREST does (one whose statement returns no rows, by
    the rows it changed); a function of one row or a scalar is PostgREST's PGRST128."""
    if max_affected is not None and function.returns != "rows":
        raise APIError(
            400,
            Rest.MAX_AFFECTED_RPC,
            "Function must return SETOF or TABLE when max-affected preference is used with handling=strict",
        )
    try:
        if function.table is not None:
            return _table_rows(function, values, read, who, max_affected)
        if function.writes and rollback:
            found = transactions.read(_execute, function, values, max_affected)
        elif function.writes:
            found = transactions.write(_execute, function, values, max_affected)
        elif function.returns == "rows":
            return transactions.read(_shaped, function, values, read, max_affected, read_only=True)
        else:
            found = transactions.read(_execute, function, values, read_only=True)
    except DBAPIError as exc:
        raise _database_error(function, exc) from None
    except BadValue as exc:
        raise rows.client_error(exc) from None
    return NO_RESULT if function.returns == "void" else _value(function, found)


def _table_rows(function, values, read, who, max_affected):
    """The rows of `function.table` whose primary key is among the function's rows, read as a read
    of that table by `who` (PostgreSQL's SETOF table, under its row policies as a function of the
    caller's rights reads them): its rule and policies, column types, embeds, filters, order, paging
    and count, all in the SQL. For `returns = "one"`, the one row or null."""
    table = reflection.reflected(function.table)
    key = [column.key for column in reflection.primary_key(table)]
    found = transactions.read(_execute, function, values, read_only=True)
    if len(key) != 1 or found is NO_RESULT or (found and key[0] not in found[0]):
        log.error("function %s: its rows lack table %s's one-column primary key", function.name, table.name)
        raise APIError(500, Rest.MISCONFIGURED, f"Function '{function.name}' is misconfigured on the server")
    if max_affected is not None and len(found) > max_affected:
        raise rows.too_many(len(found))
    keys = tuple(dict.fromkeys(str(row[key[0]]) for row in found if row[key[0]] is not None))
    query = dataclasses.replace(read.query, filters=(*read.query.filters, tree.Condition(key[0], "in", keys)))
    if function.returns == "rows" and (read.query.order or read.query.aggregates_anywhere()):
        return rows.read(function.table, who, dataclasses.replace(read, query=query))
    if function.returns == "rows":
        return _in_its_order(function.table, key[0], keys, query, read, who)
    page = rows.read(function.table, who, dataclasses.replace(read, query=query, media="json"))
    if len(page.rows) > 1:
        raise rows.not_one_row(len(page.rows))
    return page.rows[0] if page.rows else None


POSITION = "pgrst_function_order"  # the select item, hidden, by which rows go back in a function's order


def _in_its_order(name, key, keys, query, read, who):
    """A function's rows of table `name` in the order it returned their `keys` (PostgreSQL keeps a
    function's own order when a request gives none): read with their key under a hidden name, put
    back in that order, then paged."""
    text = f"{query.select or '*'},{POSITION}:{key}"
    hidden = dataclasses.replace(query, select=text, tree=select.parse_select_tree(text))
    page = rows.read(
        name, who, dataclasses.replace(read, query=hidden, offset=0, limit=len(keys), media="json")
    )
    position = {value: index for index, value in enumerate(keys)}
    ranked = sorted(page.rows, key=lambda row: position.get(str(row[POSITION]), len(keys)))
    for row in ranked:
        del row[POSITION]
    shown = ranked[read.offset : read.offset + read.limit]
    names = [alias for alias in page.names if alias != POSITION]
    return rows.Page(rows.single(read.media, shown), names, page.total)


def _execute(function, values, max_affected=None):
    result = db.session.connection().execute(sa.text(function.sql), values)
    found = [dict(row._mapping) for row in result] if result.returns_rows else NO_RESULT
    # A statement without rows (an UPDATE) is held to the rows it changed.
    affected = result.rowcount if found is NO_RESULT else len(found)
    if max_affected is not None and affected > max_affected:
        raise rows.too_many(affected)
    return found


def _value(function, found):
    if found is NO_RESULT:
        return NO_RESULT
    plain = sa.column("value")
    if function.returns == "scalar":
        return json_value(plain, next(iter(found[0].values()))) if found and found[0] else None
    shaped = [{key: json_value(plain, value) for key, value in row.items()} for row in found]
    if function.returns == "rows":
        return rows.Page(shaped, list(shaped[0]) if shaped else [])
    if len(shaped) > 1:
        raise rows.not_one_row(len(shaped))
    return shaped[0] if shaped else None


def _shaped(function, values, read, max_affected=None):
    """A rows function's result as a table's read: select, filters, order, paging, count. Without
    filters or order the statement runs as written, so its own ORDER BY holds on every database
    (MySQL does not keep the order of a subquery); paging then applies to its rows."""
    statement = sa.text(function.sql).bindparams(**values)
    if not read.query.filters and not read.query.order and not read.query.computed():
        return _paged(function, statement, read, max_affected)
    anything = statement.columns().subquery("rpc")
    probe = db.session.connection().execute(sa.select(sa.text("*")).select_from(anything).limit(1))
    first = probe.first()
    names = list(probe.keys())
    types = {name: _column_type(first[index] if first else None) for index, name in enumerate(names)}
    source = statement.columns(**types).subquery("rpc")
    if max_affected is not None and (returned := reads.count(source, None)) > max_affected:
        raise rows.too_many(returned)
    try:
        items = resolve.parse_select(read.query.select, source, aggregates=True)
        where = reads.condition(read.query.filters, source)
        order = reflection.ordering(read.query.order, source)
        if read.query.aggregates():
            found, total = _grouped(source, items, where, order, read)
        else:
            found = []
            if read.limit != 0:
                found = reads.select_rows(source, items, where, order, read.offset, read.limit)
            total = reads.count(source, where) if read.count else None
    except tree.FilterError as exc:
        raise rows.client_error(exc) from None
    return rows.Page(rows.single(read.media, found), [item.alias for item in items], total)


def _grouped(source, items, where, order, read):
    """A function's rows aggregated as a table's are (PostgREST's `select=name.count(),status`):
    grouped by the items that are not aggregates, in the order asked or else the groups'; the
    groups counted."""
    columns = [resolve.output(item, source).label(f"c{i}") for i, item in enumerate(items)]
    groups = [sa.literal_column(f"c{i}") for i, item in enumerate(items) if not item.aggregate]
    statement = reads.filtered(sa.select(*columns).select_from(source), where).group_by(*groups)
    total = reads.execute(sa.select(sa.func.count()).select_from(statement.subquery("groups"))).scalar()
    statement = statement.order_by(*(order or groups)).offset(read.offset).limit(read.limit)
    found = reads.execute(statement).all() if read.limit != 0 else []
    return json_rows(row_shape(source, items), found), total if read.count else None


def _paged(function, statement, read, max_affected=None):
    result = db.session.connection().execute(statement)
    found = [tuple(row) for row in result]
    if max_affected is not None and len(found) > max_affected:
        raise rows.too_many(len(found))
    source = sa.table("rpc", *(sa.column(name, sa.Text()) for name in result.keys()))
    try:
        items = resolve.parse_select(read.query.select, source)
    except tree.FilterError as exc:
        raise rows.client_error(exc) from None
    names = list(result.keys())
    picked = [
        {item.alias: json_value(source.c[item.column], row[names.index(item.column)]) for item in items}
        for row in found[read.offset : read.offset + read.limit]
    ]
    return rows.Page(
        rows.single(read.media, picked), [item.alias for item in items], len(found) if read.count else None
    )


def _column_type(value):
    for kind, column_type in TYPES:
        if isinstance(value, kind):
            return column_type()
    return sa.Text()


def _database_error(function, exc):
    """The 4xx or 5xx for what the database refused of a function's statement."""
    code = failures.error_code(exc)
    text = str(getattr(exc, "orig", "")).lower()
    if code == MYSQL_READ_ONLY or "readonly database" in text or "read-only" in text:
        return APIError(
            405, Rest.READ_ONLY, f"function {function.name} may not change data",
            hint="declare writes = true for it in tables.toml, and call it with POST",
        )  # fmt: skip
    if isinstance(exc, IntegrityError):
        return APIError(
            409, Rest.INTEGRITY_VIOLATION, f"function {function.name}'s change violates a constraint"
        )
    if isinstance(exc, sa.exc.DataError):
        return APIError(400, Rest.INVALID_TEXT, f"an argument of function {function.name} does not fit")
    if failures.unavailable(exc):
        return exc  # the database is not answering: the usual 503
    log.error("function %s: its SQL failed: %s", function.name, type(exc.orig).__name__)
    return APIError(500, Rest.MISCONFIGURED, f"Function '{function.name}' is misconfigured on the server")
