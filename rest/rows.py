"""The table API's work on rows, the service below blueprints/rest.py: one function per operation
(`read`, `insert`, `update`, `delete`), each of which authorizes the caller (asked of policies.py),
runs the work in one transaction (database.transactions) on the reflected table, and turns what the
client did wrong into PostgREST's codes. Requests come in parsed; rows go out as JSON-ready dicts."""

import functools
import logging
from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError

from database import transactions
from encoding import json_page
from errors import APIError, Rest
from query import params, resolve, tree
from rest import embeds, plans, policies, reads, reflection, refusals, writes
from rest.refusals import client_error, database_error
from values import BadValue, body_converter, body_value

log = logging.getLogger("minibase")


# --- what a request asks, parsed by the view


@dataclass(frozen=True)
class Prefer:
    """The Prefer header: what to return, whether to count, how an insert meets an existing row.
    `applied` lists the preferences a write honours, for Preference-Applied."""

    returns: str = "minimal"
    count: bool = False
    resolution: str | None = None
    missing_default: bool = False
    applied: tuple = ()
    max_affected: int | None = None  # handling=strict: a PATCH or DELETE may change at most this many
    rollback: bool = False  # the write's transaction ends rolled back (DB_TX_END, Prefer: tx=rollback)
    shown: tuple = ()  # what Preference-Applied says on a read: count, tx, handling


@dataclass(frozen=True)
class Read:
    query: params.Query
    offset: int
    limit: int
    count: bool
    media: str  # json, object (exactly one row) or csv
    prefer: Prefer = Prefer()

    def columns(self):
        """The table's own columns the request names: the reflected table must have them."""
        return self.query.names


@dataclass(frozen=True)
class Write:
    query: params.Query
    prefer: Prefer
    media: str
    rows: list = field(default_factory=list)  # the body's objects
    columns_param: tuple | None = None
    on_conflict: tuple | None = None

    def written(self):
        """The columns the body sets."""
        return {key for row in self.rows for key in row}

    def columns(self):
        """The table's own columns the request names: the reflected table must have them."""
        names = self.query.names | self.written()
        return names | set(self.columns_param or ()) | set(self.on_conflict or ())


@dataclass(frozen=True)
class Unparsed:
    """A request whose query string, headers or body did not parse. Its error is answered after the
    access check: an unknown table or a refused caller is told so first, whatever else is wrong."""

    error: APIError
    prefer: Prefer = Prefer()


@dataclass(frozen=True)
class Page:
    """Rows to answer with, their aliases (a CSV header when there are no rows), the total when
    counted (a read) or the number of rows written (a write), and the primary keys ({column: value})
    of the rows inserted, and for a POST how many rows were inserted rather than merged."""

    rows: list
    names: list
    total: int | None = None
    keys: list = field(default_factory=list)
    inserted: int | None = None  # of a POST: the rows inserted, not merged into existing ones
    plain: bool = False  # every value in `rows` is text, an integer or null (plain JSON to encode)


# --- who may do what


@dataclass(frozen=True)
class Access:
    """The caller's grants on one table for one request."""

    action: policies.Grant  # the operation asked for
    # Reading the rows: what return=representation reads back, and, on a PATCH or DELETE, which rows
    # it may reach at all (None: a write-only caller, who may not read the table)
    read: policies.Grant | None = None
    merge: policies.Grant | None = None  # updating the rows an upsert finds (merge-duplicates)
    who: object = None  # the caller (auth.identity.Identity): embedded tables are authorized for it


def permit(name, operation, who, prefer=None):
    """The caller's Access to table `name`: 404, 401 or 403 before anything else is looked at."""
    prefer = prefer or Prefer()
    read = "select" if prefer.returns == "representation" else None
    merge = "update" if operation == "insert" and prefer.resolution == "merge-duplicates" else None
    action, reading, merging = policies.grants(name, who, operation, read, merge)
    if reading is None and operation in ("update", "delete"):
        reading = _may_read(name, who)
    return Access(action, reading, merging, who)


def _may_read(name, who):
    """The caller's select Grant, which a PATCH or DELETE is kept to as well: PostgreSQL applies a
    table's SELECT policies to an UPDATE or DELETE that reads rows, as PostgREST's always do. Without
    it, rows the select policy hides could be counted (Prefer: max-affected's refusal, count=exact)
    by a caller whose update or delete policy reaches them. None for a caller who may not read the
    table at all: its writes are kept to their own rule and policy, as before."""
    try:
        return policies.grants(name, who, "select")[0]
    except APIError:
        return None


# --- the four operations


def read(name, who, request):
    """One page of the rows the request and the caller's grant select, and their total when it is
    asked for."""
    return _run(name, "select", who, request, _select)


def insert(name, who, write):
    return _run(name, "insert", who, write, _create)


def update(name, who, write):
    return _run(name, "update", who, write, _at_most(_modify))


def delete(name, who, write):
    return _run(name, "delete", who, write, _at_most(_remove))


def _at_most(work):
    """`work` refused, inside its transaction so that nothing changes, when it touched more rows
    than Prefer: max-affected allows (with handling=strict)."""

    def bounded(table, access, write):
        page = work(table, access, write)
        most = write.prefer.max_affected
        if most is not None and page.total is not None and page.total > most:
            raise too_many(page.total)
        return page

    bounded.__name__ = work.__name__
    return bounded


def too_many(count):
    """PostgREST's 400 for a write past Prefer: max-affected (with handling=strict)."""
    return APIError(
        400,
        Rest.MAX_AFFECTED,
        "Query result exceeds max-affected preference constraint",
        details=f"The query affects {count} rows",
    )


def _check_not_embedded(write):
    """A write's filters are the table's own: a filter on an embedded resource would not choose the
    rows written, so it is a 400 rather than a write of more rows than meant."""
    if write.query.scoped:
        raise client_error(
            tree.FilterError(
                "filters on embedded resources are not supported on writes",
                hint="filter the rows to write on the table's own columns",
            )
        )


# --- the work, on the reflected table


def _select(table, access, request):
    if not request.query.plain:
        return _select_embedded(table, access, request)
    plan, values = plans.read_plan(table, request.query, access.action, request.offset, request.limit)
    found, total = plans.run_plan(plan, values, rows=request.limit != 0, count=request.count)
    found, plain = json_page(plan.shape, found or ())
    return Page(single(request.media, found), [item.alias for item in plan.items], total, plain=plain)


def _select_embedded(table, access, request):
    query, grant = request.query, access.action
    found, total, names, plain = embeds.read(
        table, query, access.who, grant, request.offset, request.limit, count=request.count
    )
    return Page(single(request.media, found), names, total, plain=plain)


def _embedded_reader(table, access, write):
    """For a write that returns its rows with embeds (`select=*,author:users(username)` and
    return=representation): a function of primary keys that reads those rows, embeds and all,
    under the select grant, and the names of their keys. None for any other write."""
    if write.prefer.returns != "representation" or not write.query.embeds():
        return None
    key = [column.key for column in reflection.primary_key(table)]
    if not key:
        raise client_error(
            tree.FilterError(f"table '{table.name}' has no primary key: its written rows cannot embed")
        )
    level = embeds.plan(table.name, table, write.query.embeds_only(), access.who, access.read, [])
    return functools.partial(embeds.read_keys, level, key), level.names()


def _items(table, write, reader):
    """The columns a write returns: none when its rows come back with embeds (`reader`), or when it
    returns nothing and its select embeds (then the select does not apply)."""
    if reader is not None or (write.query.embeds() and write.prefer.returns != "representation"):
        return []
    if write.query.select is None and write.prefer.returns != "representation":
        return []  # no rows returned, and no select to check
    return resolve.parse_select(write.query.select, table)


def _create(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    rows = _insert_values(table, write, access)
    target = write.on_conflict or [c.key for c in reflection.primary_key(table)]
    if write.prefer.resolution is not None or write.on_conflict is not None:
        reflection.check_conflict_target(table, target)
    upsert = None
    if write.prefer.resolution is not None:
        defaulted = tuple(write.columns_param or ()) if write.prefer.missing_default else ()
        upsert = writes.Upsert(target, write.prefer.resolution == "merge-duplicates", access.merge, defaulted)
    checked = _has_check(access.action, access.merge)
    wanted = write.prefer.returns != "minimal" or checked
    last = not checked and write.prefer.returns != "representation"
    keys, stored, inserted = writes.insert(table, rows, upsert, want_keys=wanted, last=last)
    if checked:
        _check_written(table, keys, access.action, access.merge)
    if write.prefer.returns != "representation":
        names = [c.key for c in reflection.primary_key(table)]
        return Page(
            [], [], stored, keys=[dict(zip(names, key, strict=True)) for key in keys], inserted=inserted
        )
    if reader is not None:
        read, names = reader
        return Page(single(write.media, read(keys)), names, stored, inserted=inserted)
    if not reflection.primary_key(table):
        found = reads.fetch_inserted(table, items, rows, access.read)
    else:
        found = reads.fetch(table, items, keys, access.read)
    return Page(single(write.media, found), [item.alias for item in items], stored, inserted=inserted)


def _insert_values(table, write, access):
    """The body's rows as column values: restricted to ?columns=, converted, the owner filled in."""
    rows = write.rows
    if write.columns_param is not None:
        reflection.require_columns(table, write.columns_param, "columns")
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
        for column in reflection.primary_key(table):
            if column.key not in row and not reflection.generated(table, column):
                raise database_error(refusals.Refusal("not_null", column.key), table)
    return rows


def _row_values(table, row):
    """A body object's values, converted; a 400 naming an unknown column."""
    converters = _body_converters(table)
    if not row.keys() <= converters.keys():
        reflection.require_columns(table, row, "body")
    return {key: converters[key](value) for key, value in row.items()}


def _body_converters(table):
    """The reflected table's body_converter of each column, by key: made once, and gone with the
    table when it is reflected again."""
    found = table.info.get("body_converters")
    if found is None:
        found = table.info["body_converters"] = {column.key: body_converter(column) for column in table.c}
    return found


def _modify(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    values = _row_values(table, write.rows[0])
    access.action.check_owner(values)
    if _has_check(access.action):
        return _modify_checked(table, access, write, values, reader, items)
    where = reads.condition(write.query.filters, table, access.action, access.read)
    if write.prefer.returns != "representation":
        return Page([], [], writes.update(table, values, where)[1])
    if reader is not None:
        found, count = writes.update(table, values, where, read=reader[0])
        return Page(single(write.media, found), reader[1], count)
    return _page(write.media, items, *writes.update(table, values, where, items, grant=access.read))


def _modify_checked(table, access, write, values, reader, items):
    """An update under a check policy: the rows are changed by key (the table has a primary key,
    checked at start), then checked before they are read back."""
    representation = write.prefer.returns == "representation"
    where = reads.condition(write.query.filters, table, access.action, access.read)

    def checked_then_read(keys):
        _check_written(table, keys, access.action)
        if reader is not None:
            return reader[0](keys)
        return reads.fetch(table, items, keys, access.read) if representation else []

    found, count = writes.update(table, values, where, read=checked_then_read)
    if reader is not None:
        return Page(single(write.media, found), reader[1], count)
    return _page(write.media, items, found, count) if representation else Page([], [], count)


def _has_check(*grants):
    return any(grant is not None and grant.check is not None for grant in grants)


def _check_written(table, keys, *grants):
    """A 403 (42501) when a row just written fails a grant's check policy: the request's unit of
    work is rolled back, so nothing of it is kept. Under an upsert, every row written is held to
    the insert check and, when it may merge, the update check."""
    for grant in grants:
        if grant is not None and grant.check is not None:
            if not reads.admitted(table, grant.check, grant.values, keys):
                raise policies.violation(table.name)


def _remove(table, access, write):
    reader = _embedded_reader(table, access, write)
    items = _items(table, write, reader)
    if reader is not None:
        where = reads.condition(write.query.filters, table, access.action, access.read)
        found, count = writes.delete(table, where, read=reader[0])
        return Page(single(write.media, found), reader[1], count)
    where = reads.condition(write.query.filters, table, access.action, access.read)
    if write.prefer.returns != "representation":
        return Page([], [], writes.delete(table, where)[1])
    return _page(write.media, items, *writes.delete(table, where, items))


def _page(media, items, found, total=None):
    """The rows to answer with; one object asked for means exactly one row, else a 406."""
    return Page(single(media, found), [item.alias for item in items], total)


def single(media, found):
    """`found`, unless one object is asked for and there is not exactly one row: a 406."""
    if media == "object" and len(found) != 1:
        raise not_one_row(len(found))
    return found


def not_one_row(count):
    return APIError(
        406,
        Rest.NOT_ONE_ROW,
        "Cannot coerce the result to a single JSON object",
        details=f"The result contains {count} rows",
    )


# --- one request's work, and the errors a client caused


def _run(name, operation, who, request, work):
    """`work(table, access, request)` for the caller's grant on the reflected table: a write as one
    transaction (database.transactions retries it after a deadlock or a lock wait), a read as its
    work decides. A schema that changed under the cache (a column or table dropped) is reflected
    again and the work tried once more; what the database refused because of the client becomes a
    4xx without the database's text."""
    access = permit(name, operation, who, request.prefer)
    if isinstance(request, Unparsed):
        raise request.error
    writing = operation != "select"
    if writing:
        _check_not_embedded(request)
    force = False
    while True:
        table = reflection.reflected(name, request.columns(), force=force)
        if writing and table.info.get("view"):
            raise policies.read_only(name, "it is a view")
        _check_owner_column(table, access.action.policy)
        try:
            if not writing:
                return work(table, access, request)
            end = transactions.read if request.prefer.rollback else transactions.write
            return end(work, table, access, request)
        except (tree.FilterError, BadValue) as exc:
            raise client_error(exc) from None
        except DBAPIError as exc:
            if not force and refusals.schema_changed(exc):
                log.info("table %s: %s, reflected again", name, type(exc.orig).__name__)
                force = True
                continue
            refusal = refusals.refusal(exc, table, request.written() if writing else set())
            if refusal is None:
                raise
            raise database_error(refusal, table, request.rows if writing else ()) from None


def _check_owner_column(table, policy):
    owner = policy.owner_column
    if owner is not None and owner not in table.c:
        log.error("tables.toml: owner_column %r is not a column of table %r", owner, table.name)
        raise APIError(500, Rest.MISCONFIGURED, f"Table '{table.name}' is misconfigured on the server")
