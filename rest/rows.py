"""The table API's work on rows, the service below blueprints/rest.py: who may touch them (asked of
policies.py), the four operations, each in one transaction, and the errors a client caused, with
PostgREST's codes. Requests come in parsed; rows go out as JSON-ready dicts."""

import dataclasses
import functools
import logging
from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError

import filters
from errors import APIError, Rest
from extensions import db
from rest import embeds, policies, tables
from values import BadValue, body_value, json_rows

log = logging.getLogger("minibase")

ATTEMPTS = 3  # of a request's transaction: a stale cache or a deadlock is worth another try


# --- what a request asks, parsed by the blueprint


@dataclass(frozen=True)
class Query:
    """What a request asks of a table before the table is known: filter nodes (an embedded
    resource's among them, with their path), the select tree, raw order, and the order and paging
    of embedded resources by path."""

    filters: list
    select: str | None = None
    order: str | None = None
    tree: tuple = (filters.STAR,)
    embedded: dict = field(default_factory=dict)

    def embeds(self):
        return any(isinstance(item, filters.EmbedItem) for item in self.tree)

    def embeds_only(self):
        """This query without the table's own filters: what shapes the embeds of a write's rows."""
        return dataclasses.replace(self, filters=[])

    def columns(self):
        """The table's own names the request uses: if the cache lacks one, the table is reflected
        again."""
        names = set()
        pending = list(self.filters)
        while pending:
            node = pending.pop()
            if isinstance(node, filters.Logic):
                if not node.path:
                    pending.extend(node.children)
            elif "." not in node.column:
                names.add(node.column)
        names.update(item.column for item in self.tree if isinstance(item, filters.SelectItem))
        for part in (self.order or "").split(","):
            names.add(part.split(".")[0].strip())
        names.discard("")
        names.discard("*")
        return names


def query(pairs, select=None, order=None):
    """The Query of a query string's (key, value) pairs; a 400 when a filter or select does not parse."""
    pairs = list(pairs)
    try:
        tree = filters.parse_select_tree(select)
        return Query(filters.parse_filters(pairs), select, order, tree, filters.parse_embedded(pairs))
    except filters.FilterError as exc:
        raise client_error(exc) from None


@dataclass(frozen=True)
class Prefer:
    """The Prefer header: what to return, whether to count, how an insert meets an existing row.
    `applied` lists the preferences a write honours, for Preference-Applied."""

    returns: str = "minimal"
    count: bool = False
    resolution: str | None = None
    missing_default: bool = False
    applied: tuple = ()


@dataclass(frozen=True)
class Read:
    query: Query
    offset: int
    limit: int
    count: bool
    media: str  # json, object (exactly one row) or csv


@dataclass(frozen=True)
class Write:
    query: Query
    prefer: Prefer
    media: str
    rows: list = field(default_factory=list)  # the body's objects
    columns_param: list | None = None
    on_conflict: list | None = None

    def written(self):
        """The columns the body sets."""
        return {key for row in self.rows for key in row}

    def columns(self):
        names = self.query.columns() | self.written()
        return names | set(self.columns_param or ()) | set(self.on_conflict or ())


@dataclass(frozen=True)
class Page:
    """Rows to answer with, their aliases (a CSV header when there are no rows), the total when
    counted (a read) or the number of rows written (a write), and the primary keys ({column: value})
    of the rows inserted."""

    rows: list
    names: list
    total: int | None = None
    keys: list = field(default_factory=list)


# --- who may do what


@dataclass(frozen=True)
class Access:
    """The caller's grants on one table for one request."""

    action: policies.Grant  # the operation asked for
    read: policies.Grant | None = None  # reading the rows back (return=representation)
    merge: policies.Grant | None = None  # updating the rows an upsert finds (merge-duplicates)
    who: object = None  # the caller's gateway.Identity: embedded tables are authorized for it


def permit(name, operation, who, prefer=None):
    """The caller's Access to table `name`: 404, 401 or 403 before anything else is looked at."""
    prefer = prefer or Prefer()
    policy = policies.lookup(name)
    if operation != "select" and policy.read_only:
        raise read_only(name, "users change through /auth/v1")
    action = policies.authorize(policy, operation, who)
    read = policies.authorize(policy, "select", who) if prefer.returns == "representation" else None
    merge = None
    if operation == "insert" and prefer.resolution == "merge-duplicates":
        merge = policies.authorize(policy, "update", who)
    return Access(action, read, merge, who)


# --- the four operations


def read(name, access, request):
    """One page of the rows the request and the grant select, and their total when it is asked for."""
    return _transaction(name, access, request.query.columns(), _select, request)


def insert(name, access, write):
    _check_not_embedded(write)
    return _transaction(name, access, write.columns(), _create, write, commit=True)


def update(name, access, write):
    _check_not_embedded(write)
    return _transaction(name, access, write.columns(), _modify, write, commit=True)


def delete(name, access, write):
    _check_not_embedded(write)
    return _transaction(name, access, write.columns(), _remove, write, commit=True)


def _check_not_embedded(write):
    """A write's filters are the table's own: a filter on an embedded resource would not choose the
    rows written, so it is a 400 rather than a write of more rows than meant."""
    if _scoped(write.query.filters):
        raise client_error(
            filters.FilterError(
                "filters on embedded resources are not supported on writes",
                hint="filter the rows to write on the table's own columns",
            )
        )


# --- the work, on the reflected table


def _select(table, access, request):
    if request.query.embeds() or request.query.embedded or _scoped(request.query.filters):
        return _select_embedded(table, access, request)
    plan, values = tables.read_plan(table, request.query, access.action, request.offset, request.limit)
    found, total = tables.run_plan(plan, values, rows=request.limit != 0, count=request.count)
    found = json_rows(plan.shape, found or ())
    return _page(request.media, plan.items, found, total)


def _scoped(nodes):
    """Whether a filter names an embedded resource."""
    return any(
        getattr(node, "path", ()) or (isinstance(node, filters.Condition) and "." in node.column)
        for node in nodes
    )


def _select_embedded(table, access, request):
    order = tables.ordering(request.query.order, table)
    level = embeds.plan(table.name, table, request.query, access.who, access.action, order)
    found = []
    if request.limit != 0:
        found = embeds.read(level, request.offset, request.limit)
    total = tables.count(table, level.where) if request.count else None
    return Page(_single(request.media, found), level.names(), total)


def _embedded_reader(table, access, write):
    """For a write that returns its rows with embeds (`select=*,author:users(username)` and
    return=representation): a function of primary keys that reads those rows, embeds and all,
    under the select grant, and the names of their keys. None for any other write."""
    if write.prefer.returns != "representation" or not write.query.embeds():
        return None
    key = [column.key for column in tables.primary_key(table)]
    if not key:
        raise client_error(
            filters.FilterError(f"table '{table.name}' has no primary key: its written rows cannot embed")
        )
    level = embeds.plan(table.name, table, write.query.embeds_only(), access.who, access.read, [])
    return functools.partial(embeds.read_keys, level, key), level.names()


def _items(table, write, reader):
    """The columns a write returns: none when its rows come back with embeds (`reader`), or when it
    returns nothing and its select embeds (then the select does not apply)."""
    if reader is not None or (write.query.embeds() and write.prefer.returns != "representation"):
        return []
    return filters.parse_select(write.query.select, table)


def _create(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    rows = _insert_values(table, write, access)
    target = write.on_conflict or [c.key for c in tables.primary_key(table)]
    if write.prefer.resolution is not None or write.on_conflict is not None:
        tables.check_conflict_target(table, target)
    upsert = None
    if write.prefer.resolution is not None:
        upsert = tables.Upsert(target, write.prefer.resolution == "merge-duplicates", access.merge)
    keys, stored = tables.insert(table, rows, upsert, want_keys=write.prefer.returns != "minimal")
    if write.prefer.returns != "representation":
        names = [c.key for c in tables.primary_key(table)]
        return Page([], [], stored, keys=[dict(zip(names, key, strict=True)) for key in keys])
    if reader is not None:
        read, names = reader
        return Page(_single(write.media, read(keys)), names, stored)
    if not tables.primary_key(table):
        return _page(write.media, items, tables.fetch_inserted(table, items, rows, access.read), stored)
    return _page(write.media, items, tables.fetch(table, items, keys, access.read), stored)


def _insert_values(table, write, access):
    """The body's rows as column values: restricted to ?columns=, converted, the owner filled in."""
    rows = write.rows
    if write.columns_param is not None:
        tables.require_columns(table, write.columns_param, "columns")
        keep = write.prefer.missing_default
        rows = [
            {name: row.get(name) for name in write.columns_param if name in row or not keep} for row in rows
        ]
    rows = [_row_values(table, row) for row in rows]
    owner = access.action.policy.owner_column
    for row in rows:
        if access.action.owner_id is not None and owner not in row:
            row[owner] = body_value(table.c[owner], str(access.action.owner_id))
        for grant in (access.action, access.merge):
            if grant is not None:
                grant.check_owner(row)
    for row in rows:
        for column in tables.primary_key(table):
            if column.key not in row and not tables.generated(table, column):
                raise database_error(tables.Refusal("not_null", column.key), table)
    return rows


def _row_values(table, row):
    """A body object's values, converted; a 400 naming an unknown column."""
    tables.require_columns(table, row, "body")
    return {key: body_value(table.c[key], value) for key, value in row.items()}


def _modify(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    values = _row_values(table, write.rows[0])
    access.action.check_owner(values)
    if write.prefer.returns != "representation":
        where = tables.condition(write.query.filters, table, access.action)
        return Page([], [], tables.update(table, values, where)[1])
    where = tables.condition(write.query.filters, table, access.action, access.read)
    if reader is not None:
        found, count = tables.update(table, values, where, read=reader[0])
        return Page(_single(write.media, found), reader[1], count)
    return _page(write.media, items, *tables.update(table, values, where, items))


def _remove(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    if reader is not None:
        where = tables.condition(write.query.filters, table, access.action, access.read)
        found, count = tables.delete(table, where, read=reader[0])
        return Page(_single(write.media, found), reader[1], count)
    if write.prefer.returns != "representation":
        return Page(
            [], [], tables.delete(table, tables.condition(write.query.filters, table, access.action))[1]
        )
    where = tables.condition(write.query.filters, table, access.action, access.read)
    return _page(write.media, items, *tables.delete(table, where, items))


def _page(media, items, found, total=None):
    """The rows to answer with; one object asked for means exactly one row, else a 406."""
    return Page(_single(media, found), [item.alias for item in items], total)


def _single(media, found):
    """`found`, unless one object is asked for and there is not exactly one row: a 406."""
    if media == "object" and len(found) != 1:
        raise APIError(
            406,
            Rest.NOT_ONE_ROW,
            "JSON object requested, multiple (or no) rows returned",
            details=f"The result contains {len(found)} rows",
        )
    return found


# --- the transaction, and the errors a client caused


def _transaction(name, access, columns, work, request, commit=False):
    """`work(table, access, request)` on the reflected table in one transaction, committed when
    `commit`. A schema that changed under the cache (a column or table dropped) is reflected again
    and the work tried once more, as is a transaction MySQL chose as a deadlock victim; what the
    database refused because of the client becomes a 4xx without the database's text."""
    force = False
    for attempt in range(1, ATTEMPTS + 1):
        table = tables.reflected(name, columns, force=force)
        if commit and table.info.get("view"):
            raise read_only(name, "it is a view")
        try:
            _check_owner_column(table, access.action.policy)
            result = work(table, access, request)
            if commit:
                db.session.commit()
            return result
        except (filters.FilterError, BadValue) as exc:
            db.session.rollback()
            raise client_error(exc) from None
        except DBAPIError as exc:
            db.session.rollback()
            force = tables.schema_changed(exc) and not force
            if attempt < ATTEMPTS and (force or tables.deadlock(exc)):
                log.info("table %s: %s, trying again", name, type(exc.orig).__name__)
                continue
            written = request.written() if isinstance(request, Write) else set()
            refusal = tables.refusal(exc, table, written)
            if refusal is None:
                raise
            raise database_error(refusal, table) from None
        except BaseException:
            db.session.rollback()
            raise


def read_only(name, why):
    return APIError(
        405, Rest.READ_ONLY, f"table '{name}' is read-only: {why}", headers={"Allow": "GET, HEAD"}
    )


def _check_owner_column(table, policy):
    owner = policy.owner_column
    if owner is not None and owner not in table.c:
        log.error("tables.toml: owner_column %r is not a column of table %r", owner, table.name)
        raise APIError(500, Rest.MISCONFIGURED, f"Table '{table.name}' is misconfigured on the server")


FILTER_CODES = {"syntax": Rest.BAD_QUERY, "column": Rest.UNDEFINED_COLUMN, "value": Rest.INVALID_TEXT}
REFUSAL_CODES = {
    "unique": Rest.UNIQUE_VIOLATION,
    "foreign_key": Rest.FOREIGN_KEY_VIOLATION,
    "referenced": Rest.FOREIGN_KEY_VIOLATION,
    "constraint": Rest.INTEGRITY_VIOLATION,
    "not_null": Rest.NOT_NULL_VIOLATION,
    "check": Rest.CHECK_VIOLATION,
    "too_long": Rest.STRING_TOO_LONG,
    "out_of_range": Rest.OUT_OF_RANGE,
    "invalid": Rest.INVALID_TEXT,
}


def client_error(exc):
    """The 400 for a FilterError or a BadValue: its message and hint, and the code of its kind."""
    codes = FILTER_CODES if isinstance(exc, filters.FilterError) else REFUSAL_CODES
    return APIError(400, codes[exc.kind], str(exc), hint=exc.hint)


def database_error(refusal, table):
    """The 4xx for a tables.Refusal, in words of our own (the database's text can carry data)."""
    named = f' in column "{refusal.column}"' if refusal.column else ""
    status, message = {
        "unique": (409, "duplicate key value violates unique constraint"),
        "foreign_key": (
            409,
            f'foreign key violation: a value in table "{table.name}" refers to a missing row',
        ),
        "referenced": (
            409,
            f'foreign key violation: other rows still refer to this row of table "{table.name}"',
        ),
        "constraint": (409, f'the row violates a constraint of table "{table.name}"'),
        "not_null": (400, f"null value{named} violates not-null constraint"),
        "check": (400, f'new row for table "{table.name}" violates check constraint'),
        "too_long": (400, f"value too long{named}"),
        "out_of_range": (400, f"value out of range{named}"),
        "invalid": (400, f"invalid value{named}"),
    }[refusal.kind]
    return APIError(status, REFUSAL_CODES[refusal.kind], message)
