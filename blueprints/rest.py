"""/rest/v1/{table}: PostgREST's wire format over the tables tables.toml exposes. The views parse
the request into rows.py's request objects (blueprints/rest_request.py), call rows.py, and shape
its Page into a response."""

from urllib.parse import quote

from flask import Blueprint, Response, current_app, json, request

from blueprints.gateway import identity
from blueprints.rest_request import (
    ARRAY,
    CSV,
    JSON,
    OBJECT,
    STRIPPED,
    accepted,
    json_body,
    parse_read,
    parse_write,
    parsed,
    preferences,
    require_public_schema,
)
from encoding import csv_field, plain_json
from errors import APIError, Rest, bad_body
from query import filters, tree
from rest import openapi, policies, rows, rpc

bp = Blueprint("rest", __name__, url_prefix="/rest/v1")

COMPACT = (",", ":")


# --- the views: authorize, parse, call rows.py, shape the response


@bp.get("/")
def describe():
    require_public_schema()
    return openapi.document(identity())


@bp.route("/rpc/<name>", methods=["GET", "POST"])
def call_function(name):
    """A function of tables.toml: arguments from the JSON body (POST) or the query string (GET)."""
    require_public_schema()
    function, post = policies.functions().get(name), request.method == "POST"
    if function is None:
        raise rpc.not_found(name, body_keys() if post else query_arguments(None), post)
    who = identity()
    policies.authorize_function(function, who)
    if not post and function.writes:
        raise APIError(
            405, Rest.METHOD_NOT_ALLOWED, f"function {name} changes data: call it with POST",
            headers={"Allow": "POST"},
        )  # fmt: skip
    given = function_body() if post else query_arguments(function)
    headers = request.headers.items() if rpc.HEADERS in function.params else ()
    values = rpc.arguments(function, given, who, post, headers)
    shaped = function.returns == "rows" or function.table is not None
    read = parse_read(exclude=function.params) if shaped else None
    prefer = preferences()
    result = rpc.call(function, values, read, who, prefer.rollback, prefer.max_affected)
    if isinstance(result, rows.Page):
        response = page_response(read, result)
    elif result is rpc.NO_RESULT:
        response = Response(status=204)
    else:
        response = Response(json.dumps(result, separators=COMPACT), mimetype=JSON)
    if function.returns in ("one", "scalar", "void"):  # PostgREST counts their one result
        response.headers["Content-Range"] = "0-0/1" if prefer.count else "0-0/*"
    applied = [
        *prefer.shown,
        *([f"max-affected={prefer.max_affected}"] if prefer.max_affected is not None else []),
    ]
    if applied:
        response.headers["Preference-Applied"] = ", ".join(applied)
    return response


def function_body():
    body = json_body(empty={})
    if not isinstance(body, dict):
        raise bad_body("The request body must be a JSON object of the function's arguments")
    return body


def body_keys():
    """The argument names of a POST to a function that does not exist, for the 404 that lists them."""
    try:
        return list(function_body())
    except APIError:
        return []


def query_arguments(function):
    """A GET's arguments: the query parameters that are neither reserved (select, order, limit, …)
    nor, for a function of rows, a filter on them (a value with an operator, `name=like.*a*`), as
    PostgREST tells them apart. A name the function does not take is no filter: PostgREST's 404
    names it, so a misspelt argument is never ignored."""
    given = {}
    for key, value in request.args.items(multi=True):
        if function is not None and key in function.params:
            given[key] = value
            continue
        if key in tree.RESERVED or key.partition(".")[0] in tree.RESERVED:
            continue
        if function is None or function.returns == "rows" or function.table is not None:
            try:
                filters.parse_filters([(key, value)])
                continue
            except tree.FilterError:
                pass
        given[key] = value
    return given


@bp.get("/<name>")
def read_rows(name):
    who, read = identity(), parsed(parse_read)
    return page_response(read, rows.read(name, who, read))


@bp.post("/<name>")
def insert_rows(name):
    who, write = identity(), parsed(parse_write, array=True)
    page = rows.insert(name, who, write)
    return write_response(name, write, page, status=insert_status(write.prefer, page))


@bp.patch("/<name>")
def update_rows(name):
    who, write = identity(), parsed(parse_write, filtered=True)
    return write_response(name, write, rows.update(name, who, write), status=changed_status(write.prefer))


@bp.delete("/<name>")
def delete_rows(name):
    who, write = identity(), parsed(parse_write, filtered=True, body=False)
    return write_response(name, write, rows.delete(name, who, write), status=changed_status(write.prefer))


def insert_status(prefer, page):
    """201, or 200 for an upsert that merged every row and inserted none (PostgREST's rule)."""
    return 200 if prefer.resolution == "merge-duplicates" and page.inserted == 0 else 201


def changed_status(prefer):
    return 200 if prefer.returns == "representation" else 204


# --- shaping the response


def page_response(read, page):
    """200/206 with Content-Range (PostgREST's rules), 416 past the end."""
    media, offset = read.media, read.offset
    total = page.total
    upper = offset + len(page.rows) - 1
    shown = f"{offset}-{upper}" if total != 0 and offset <= upper else "*"
    content_range = f"{shown}/{'*' if total is None else total}"
    status = 200
    if total is not None and offset > total:
        raise APIError(
            416,
            Rest.RANGE_NOT_SATISFIABLE,
            "Requested range not satisfiable",
            details=f"An offset of {offset} was requested, but there are only {total} rows.",
            headers={"Content-Range": f"*/{total}"},
        )
    if total is not None and len(page.rows) < total:
        status = 206
    response = rows_response(page.rows, page.names, media, status, page.plain)
    response.headers["Content-Range"] = content_range
    if read.prefer.shown:
        response.headers["Preference-Applied"] = ", ".join(read.prefer.shown)
    return response


def write_response(name, write, page, status):
    """The write's status and rows; with Prefer: count=exact, how many rows it wrote in
    Content-Range, as PostgREST does: "*/3", and "0-2/3" for an update."""
    if write.prefer.returns == "representation":
        response = rows_response(page.rows, page.names, write.media, status)
    else:
        response = Response(status=status)
        if write.prefer.returns == "headers-only" and len(page.keys) == 1 and page.keys[0]:
            response.headers["Location"] = location(name, page.keys[0])
    if write.prefer.count:
        shown = f"0-{page.total - 1}" if request.method == "PATCH" and page.total else "*"
        response.headers["Content-Range"] = f"{shown}/{page.total}"
    if write.prefer.applied:
        response.headers["Preference-Applied"] = ", ".join(write.prefer.applied)
    return response


def location(name, key):
    """The path that reads the row with primary key `key` ({column: value}) back."""
    return f"/{quote(name)}?" + "&".join(f"{quote(column)}=eq.{quote(str(v))}" for column, v in key.items())


def rows_response(found, names, media, status, plain=False):
    """The rows as the media asked; `plain` says every value in them is text, an integer or null."""
    app = current_app._get_current_object()  # each lookup through Flask's proxies costs: once here
    asked = accepted(request._get_current_object().headers.get("Accept", "")) or ""
    if asked.endswith(STRIPPED):
        found = [stripped(row) for row in found]
        kind = (OBJECT if media == "object" else ARRAY) + ";nulls=stripped"
        body = found[0] if media == "object" else found
        return Response(encoded(app, body, plain), status=status, content_type=kind)
    if media == "object":
        return Response(encoded(app, found[0], plain), status=status, mimetype=OBJECT)
    if media == "csv":
        header = ",".join(names or (list(found[0]) if found else []))
        lines = [header, *(",".join(map(csv_field, row.values())) for row in found)]
        # Lines are separated, not ended, as PostgREST's: no newline after the last one.
        return Response("\n".join(lines), status=status, mimetype=CSV)
    kind = ARRAY if asked.startswith("application/vnd.pgrst.array") else JSON
    return Response(encoded(app, found, plain), status=status, mimetype=kind)


def encoded(app, rows, plain):
    """Rows as compact JSON text: by encoding.plain_json when `plain` (the same bytes, ~10x faster),
    else by json without the check for cycles: rows are trees of new dicts and lists (an embed's
    empty list may be shared, never nested in itself), and the check costs a fifth of encoding a
    page with embeds."""
    if plain:
        return plain_json(rows)
    return app.json.dumps(rows, separators=COMPACT, check_circular=False)


def stripped(value):
    """`value` without the keys whose value is null, in nested objects too (not in arrays: a null
    element stays), as PostgreSQL's json_strip_nulls."""
    if isinstance(value, dict):
        return {key: stripped(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [stripped(item) for item in value]
    return value
