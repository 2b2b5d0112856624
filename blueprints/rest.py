"""/rest/v1/{table}: PostgREST's wire format over the tables tables.toml exposes (SPEC §4)."""

import csv
import io
import logging
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from flask import Blueprint, Response, current_app, json, request

import filters
import openapi
import policies
import tables
from errors import APIError
from gateway import identity

bp = Blueprint("rest", __name__, url_prefix="/rest/v1")
log = logging.getLogger("minibase")

JSON = "application/json"
OBJECT = "application/vnd.pgrst.object+json"
CSV = "text/csv"
MEDIA_TYPES = {JSON: "json", OBJECT: "object", "application/vnd.pgrst.object": "object", CSV: "csv"}
COUNTS = ("exact", "planned", "estimated")  # all counted exactly: MySQL has no cheap estimate
RANGE = re.compile(r"(?:items=)?\s*([0-9]{1,18})-([0-9]{1,18})?")
NUMBER = re.compile(r"[0-9]{1,18}")
COMPACT = (",", ":")


# --- the views: parse, do the work, shape the response


@bp.get("/")
def describe():
    return openapi.document(identity())


@bp.get("/<name>")
def read_rows(name):
    grants = permit(name, "select")
    read = parse_read()
    page = on_table(name, grants, read.query.columns(), lambda table: tables.read(table, read, grants.action))
    return page_response(read, page)


@bp.post("/<name>")
def insert_rows(name):
    grants = permit(name, "insert")
    write = parse_write(array=True)
    page = on_table(name, grants, write.columns(), lambda table: create(table, write, grants), write=True)
    return write_response(name, write, page, status=201)


@bp.patch("/<name>")
def update_rows(name):
    grants = permit(name, "update")
    write = parse_write(filtered=True)
    page = on_table(name, grants, write.columns(), lambda table: modify(table, write, grants), write=True)
    return write_response(name, write, page, status=200 if write.prefer.returns == "representation" else 204)


@bp.delete("/<name>")
def delete_rows(name):
    grants = permit(name, "delete")
    write = parse_write(filtered=True, body=False)
    page = on_table(name, grants, write.columns(), lambda table: remove(table, write, grants), write=True)
    return write_response(name, write, page, status=200 if write.prefer.returns == "representation" else 204)


# --- who may do what


@dataclass(frozen=True)
class Grants:
    action: policies.Grant  # the operation asked for
    read: policies.Grant | None = None  # reading the rows back (return=representation)
    merge: policies.Grant | None = None  # updating the rows an upsert finds (merge-duplicates)


def permit(name, operation):
    """The caller's grants on table `name`: 401/403 before anything else is looked at."""
    who = identity()
    policy = policies.lookup(name)
    prefer = preferences()
    action = policies.authorize(policy, operation, who)
    read = policies.authorize(policy, "select", who) if prefer.returns == "representation" else None
    merge = None
    if operation == "insert" and prefer.resolution == "merge-duplicates":
        merge = policies.authorize(policy, "update", who)
    return Grants(action, read, merge)


def on_table(name, grants, columns, work, write=False):
    """tables.run, after checking that the table has the owner_column tables.toml names."""
    owner = grants.action.policy.owner_column

    def checked(table):
        if owner is not None and owner not in table.c:
            log.error("tables.toml: owner_column %r is not a column of table %r", owner, name)
            raise APIError(500, "misconfigured", f"Table '{name}' is misconfigured on the server")
        return work(table)

    return tables.run(name, columns, checked, write=write)


# --- parsing the request


@dataclass(frozen=True)
class Prefer:
    returns: str = "minimal"
    count: bool = False
    resolution: str | None = None
    missing_default: bool = False
    applied: tuple = ()


def preferences():
    """The Prefer header(s); unknown or malformed preferences are ignored, as PostgREST does.
    `applied` lists those a write honours, for Preference-Applied."""
    found = {}
    for header in request.headers.getlist("Prefer"):
        for token in header.split(","):
            key, _, value = token.strip().partition("=")
            found[key.strip().lower()] = value.strip().lower()
    returns = (
        found.get("return") if found.get("return") in ("minimal", "headers-only", "representation") else None
    )
    count = found.get("count") if found.get("count") in COUNTS else None
    resolution = found.get("resolution")
    resolution = resolution if resolution in ("merge-duplicates", "ignore-duplicates") else None
    missing = found.get("missing") if found.get("missing") in ("default", "null") else None
    applied = [
        f"{key}={value}"
        for key, value in (("return", returns), ("resolution", resolution), ("missing", missing))
        if value
    ]
    return Prefer(returns or "minimal", count is not None, resolution, missing == "default", tuple(applied))


def media_type():
    """json, object (one row) or csv, from the Accept header; 406 for anything else."""
    header = request.headers.get("Accept", "").strip()
    if not header:
        return "json"
    best = request.accept_mimetypes.best_match(list(MEDIA_TYPES))
    if best is None:
        raise APIError(406, "not_acceptable", f"None of these media types are available: {header[:100]}")
    return MEDIA_TYPES[best]


def filter_nodes():
    try:
        return filters.parse_filters(request.args.items(multi=True))
    except filters.FilterError as exc:
        raise APIError(400, "bad_request", str(exc), hint=exc.hint) from None


def count_parameter(name):
    raw = request.args.get(name)
    if raw is None:
        return None
    if not NUMBER.fullmatch(raw):
        raise APIError(400, "bad_request", f'"{name}" must be a non-negative integer, not "{raw[:40]}"')
    return int(raw)


@dataclass(frozen=True)
class Read:
    query: tables.Query
    offset: int
    limit: int
    count: bool
    media: str


def parse_read():
    """The query, and limit and offset intersected with a Range header, capped at MAX_ROWS."""
    query = tables.Query(filter_nodes(), request.args.get("select"), request.args.get("order"))
    offset = count_parameter("offset") or 0
    limit = count_parameter("limit")
    upper = None if limit is None else offset + limit - 1
    header = request.headers.get("Range")
    if header is not None:
        unit = request.headers.get("Range-Unit", "items").strip().lower()
        found = RANGE.fullmatch(header.strip())
        if unit != "items" or found is None:
            raise APIError(
                400, "bad_range", f'malformed Range header "{header[:40]}"', hint='use "Range: 0-9"'
            )
        first, last = int(found.group(1)), found.group(2)
        if last is not None and int(last) < first:
            raise APIError(
                400, "bad_range", f'malformed Range header "{header[:40]}": the end is before the start'
            )
        offset = max(offset, first)
        if last is not None:
            upper = int(last) if upper is None else min(upper, int(last))
    limit = None if upper is None else max(upper - offset + 1, 0)
    maximum = current_app.config["MAX_ROWS"]
    limit = maximum if limit is None else min(limit, maximum)
    return Read(query, offset, limit, preferences().count, media_type())


@dataclass(frozen=True)
class Write:
    query: tables.Query
    prefer: Prefer
    media: str
    rows: list = field(default_factory=list)
    columns_param: list | None = None
    on_conflict: list | None = None

    def columns(self):
        names = self.query.columns() | {key for row in self.rows for key in row}
        return names | set(self.columns_param or ()) | set(self.on_conflict or ())


def names_parameter(name):
    raw = request.args.get(name)
    if raw is None:
        return None
    names = [part.strip().strip('"') for part in raw.split(",")]
    if not all(names):
        raise APIError(400, "bad_request", f'"{name}" must be a comma-separated list of column names')
    return names


def parse_write(array=False, filtered=False, body=True):
    """A write request: filters (required for PATCH and DELETE), preferences and the body's rows."""
    for reserved in ("limit", "offset", "order"):
        if reserved in request.args:
            raise APIError(400, "bad_request", f'"{reserved}" is not supported on {request.method}')
    nodes = filter_nodes()
    if nodes and not filtered:
        raise APIError(400, "bad_request", f"filters are not supported on {request.method}")
    if filtered and not nodes:
        raise APIError(
            400,
            "filter_required",
            f"{request.method} requires a filter",
            hint="add a filter such as ?id=eq.1; to touch every row, filter on a column every row has",
        )
    query = tables.Query(nodes, request.args.get("select"))
    rows = body_rows(array) if body else []
    columns = names_parameter("columns")
    if columns is None and len({frozenset(row) for row in rows}) > 1:
        raise APIError(
            400, "bad_json", "All object keys must match", hint="or name the columns with ?columns="
        )
    return Write(query, preferences(), media_type(), rows, columns, names_parameter("on_conflict"))


def body_rows(array):
    """The JSON body as a list of objects: an object (or, when `array`, an array of objects)."""
    raw = request.get_data(cache=False)
    try:
        data = json.loads(raw) if raw.strip() else None
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise APIError(400, "bad_json", "Could not parse the request body as JSON") from None
    if isinstance(data, dict) and (array or data):
        return [data]
    if array and isinstance(data, list) and all(isinstance(row, dict) for row in data):
        return data
    expected = "a JSON object or an array of objects" if array else "a JSON object with the columns to change"
    raise APIError(400, "bad_json", f"The request body must be {expected}")


# --- the work


def representation(write, items, rows):
    """The rows to return, checked against Accept: one object means exactly one row (else 406)."""
    if write.media == "object" and len(rows) != 1:
        raise not_one_row(len(rows))
    return tables.Page(rows, [item.alias for item in items])


def create(table, write, grants):
    items = filters.parse_select(write.query.select, table)
    rows = insert_values(table, write, grants)
    target = write.on_conflict or [c.key for c in tables.primary_key(table)]
    if write.prefer.resolution is not None or write.on_conflict is not None:
        tables.check_conflict_target(table, target)
    upsert = None
    if write.prefer.resolution is not None:
        upsert = tables.Upsert(target, write.prefer.resolution == "merge-duplicates", grants.merge)
    keys = tables.insert(table, rows, upsert, want_keys=write.prefer.returns != "minimal")
    if write.prefer.returns != "representation":
        return tables.Page([], [], keys=keys)
    if not tables.primary_key(table):
        return representation(write, items, tables.fetch_inserted(table, items, rows, grants.read))
    return representation(write, items, tables.fetch(table, items, keys, grants.read))


def insert_values(table, write, grants):
    """The body's rows as column values: restricted to ?columns=, converted, the owner filled in."""
    rows = write.rows
    if write.columns_param is not None:
        tables.require_columns(table, write.columns_param, "columns")
        keep = write.prefer.missing_default
        rows = [
            {name: row.get(name) for name in write.columns_param if name in row or not keep} for row in rows
        ]
    rows = [tables.row_values(table, row) for row in rows]
    owner = grants.action.policy.owner_column
    for row in rows:
        if grants.action.owner_id is not None and owner not in row:
            row[owner] = tables.body_value(table.c[owner], str(grants.action.owner_id))
        check_owner(row, owner, grants.action, grants.merge)
    return rows


def check_owner(values, owner, *grants):
    """A 403 when the values set the owner column to someone other than an owner-rule caller."""
    for grant in grants:
        if grant is not None and owner in values and not grant.owns(values[owner]):
            raise APIError(
                403, "permission_denied", "permission denied to set the owner of a row to another user"
            )


def modify(table, write, grants):
    items = filters.parse_select(write.query.select, table)
    values = tables.row_values(table, write.rows[0])
    check_owner(values, grants.action.policy.owner_column, grants.action)
    if write.prefer.returns != "representation":
        tables.update(table, values, tables.condition(write.query, table, grants.action))
        return tables.Page([], [])
    where = tables.condition(write.query, table, grants.action, grants.read)
    return representation(write, items, tables.update(table, values, where, items))


def remove(table, write, grants):
    items = filters.parse_select(write.query.select, table)
    if write.prefer.returns != "representation":
        tables.delete(table, tables.condition(write.query, table, grants.action))
        return tables.Page([], [])
    where = tables.condition(write.query, table, grants.action, grants.read)
    return representation(write, items, tables.delete(table, where, items))


def not_one_row(count):
    return APIError(
        406,
        "not_acceptable",
        "JSON object requested, multiple (or no) rows returned",
        details=f"The result contains {count} rows",
    )


# --- shaping the response


def page_response(read, page):
    """200/206 with Content-Range (PostgREST's rules), 416 past the end, 406 for a non-single object."""
    media, offset = read.media, read.offset
    if media == "object" and len(page.rows) != 1:
        raise not_one_row(len(page.rows))
    total = page.total
    upper = offset + len(page.rows) - 1
    shown = f"{offset}-{upper}" if total != 0 and offset <= upper else "*"
    content_range = f"{shown}/{'*' if total is None else total}"
    status = 200
    if total is not None and offset > total:
        raise APIError(
            416,
            "range_not_satisfiable",
            "Requested range not satisfiable",
            details=f"An offset of {offset} was requested, but there are only {total} rows.",
            headers={"Content-Range": f"*/{total}"},
        )
    if total is not None and len(page.rows) < total:
        status = 206
    response = rows_response(page.rows, page.names, media, status)
    response.headers["Content-Range"] = content_range
    if read.count:
        response.headers["Preference-Applied"] = "count=exact"
    return response


def write_response(name, write, page, status):
    if write.prefer.returns == "representation":
        response = rows_response(page.rows, page.names, write.media, status)
    else:
        response = Response(status=status)
        if write.prefer.returns == "headers-only" and len(page.keys) == 1 and page.keys[0]:
            response.headers["Location"] = location(name, page.keys[0])
    if write.prefer.applied:
        response.headers["Preference-Applied"] = ", ".join(write.prefer.applied)
    return response


def location(name, key):
    table = tables.reflected(name)
    pairs = zip(tables.primary_key(table), key, strict=True)
    return f"/{quote(name)}?" + "&".join(f"{quote(c.key)}=eq.{quote(str(v))}" for c, v in pairs)


def rows_response(rows, names, media, status):
    if media == "object":
        return Response(json.dumps(rows[0], separators=COMPACT), status=status, mimetype=OBJECT)
    if media == "csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(names or (list(rows[0]) if rows else []))
        writer.writerows([tables.text_value(value) for value in row.values()] for row in rows)
        return Response(text.getvalue(), status=status, mimetype=CSV)
    return Response(json.dumps(rows, separators=COMPACT), status=status, mimetype=JSON)
