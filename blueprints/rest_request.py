"""/rest/v1's request, parsed into rows.py's request objects: the query string (kept, once parsed,
per query string and headers), the Prefer header, the media type asked, the Range, and the body.
blueprints/rest.py's views call these."""

import dataclasses
import functools
import re

from flask import current_app, request
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from errors import APIError, Rest, bad_body, bad_query
from query import params, tree
from rest import rows
from values import MAX_DEPTH, strict_json

JSON = "application/json"
OBJECT = "application/vnd.pgrst.object+json"
CSV = "text/csv"
ARRAY = "application/vnd.pgrst.array+json"
STRIPPED = "; nulls=stripped"  # PostgREST's json_strip_nulls: no key whose value is null, at any depth
MEDIA_TYPES = {
    JSON: "json",
    OBJECT: "object",
    "application/vnd.pgrst.object": "object",
    CSV: "csv",
    ARRAY: "json",
    "application/vnd.pgrst.array": "json",
    ARRAY + STRIPPED: "json",
    "application/vnd.pgrst.array" + STRIPPED: "json",
    OBJECT + STRIPPED: "object",
    "application/vnd.pgrst.object" + STRIPPED: "object",
}
COUNTS = ("exact", "planned", "estimated")  # all counted exactly: MySQL has no cheap estimate
RANGE = re.compile(r"(?:items=)?\s*([0-9]{1,18})-([0-9]{1,18})?")
NUMBER = re.compile(r"[0-9]{1,18}")


SCHEMAS = ("public",)  # the one schema minibase serves: the SDKs name it in Accept-/Content-Profile


def require_public_schema():
    """A 406 (PGRST106) when Accept-Profile (reads) or Content-Profile (writes) names a schema
    minibase does not serve, rather than the request silently reading the default one."""
    asked = request._get_current_object()  # one lookup behind the proxy (gateway.before)
    header = "Accept-Profile" if asked.method in ("GET", "HEAD") else "Content-Profile"
    schema = asked.headers.get(header)
    if schema is not None and schema.strip() not in SCHEMAS:
        raise APIError(
            406, Rest.UNKNOWN_SCHEMA, f"The schema must be one of the following: {', '.join(SCHEMAS)}"
        )


def parsed(parse, **options):
    """The request as `parse` reads it, or, when it does not parse, a rows.Unparsed that the service
    refuses after its access check."""
    require_public_schema()
    try:
        return parse(**options)
    except APIError as error:
        return rows.Unparsed(error, preferences())


def parse_query(pairs, select=None, order=None):
    """The query string as a params.Query; a 400 when a filter or select does not parse."""
    try:
        query = params.parse_query(pairs, select, order)
    except tree.FilterError as exc:
        raise rows.client_error(exc) from None
    if query.aggregates_anywhere() and not current_app.config["DB_AGGREGATES_ENABLED"]:
        # PostgREST's db-aggregates-enabled: off by default, since an aggregate over a large table
        # is an easy way to make the database work hard.
        raise APIError(400, Rest.AGGREGATES_DISABLED, "Use of aggregate functions is not allowed")
    return query


def preferences():
    """The Prefer header(s); unknown or malformed preferences are ignored, as PostgREST does. The
    server joins repeated headers into the one environ key werkzeug's headers read (getlist, which
    walks every header, finds that one)."""
    prefer = request._get_current_object().environ.get("HTTP_PREFER")
    return parsed_preferences(() if prefer is None else (prefer,), current_app.config["DB_TX_END"])


# The values each preference takes; of a preference given twice, the first that is one of them counts.
PREFERENCES = {
    "resolution": ("merge-duplicates", "ignore-duplicates"),
    "missing": ("default", "null"),
    "return": ("representation", "minimal", "headers-only"),
    "count": COUNTS,
    "tx": ("commit", "rollback"),
    "handling": ("strict", "lenient"),
}


@functools.lru_cache(maxsize=128)
def parsed_preferences(headers, tx_end):
    """Clients send the same few Prefer headers again and again: each is parsed once (Prefer is
    frozen). `tx_end` is DB_TX_END: whether a transaction commits, and whether `tx=` may say
    otherwise. Preference-Applied lists them in PostgREST's order."""
    found = {}
    for header in headers:
        for token in header.split(","):
            key, _, value = token.strip().partition("=")
            key, value = key.strip().lower(), value.strip().lower()
            if key not in found and (value in PREFERENCES.get(key, ()) or key == "max-affected"):
                found[key] = value
    if not tx_end.endswith("-allow-override"):
        found.pop("tx", None)
    tx = found.get("tx")
    counted = "exact" if found.get("count") else None  # every count is exact
    # max-affected binds only with handling=strict, as in PostgREST; lenient ignores it.
    strict = found.get("handling") == "strict"
    most = found.get("max-affected", "")
    max_affected = int(most) if strict and NUMBER.fullmatch(most) else None
    named = {**found, "count": counted, "max-affected": most if max_affected is not None else None}
    applied = [f"{key}={named[key]}" for key in (*PREFERENCES, "max-affected") if named.get(key)]
    shown = [f"{key}={named[key]}" for key in ("count", "tx", "handling") if named.get(key)]
    return rows.Prefer(
        found.get("return", "minimal"),
        counted is not None,
        found.get("resolution"),
        found.get("missing") == "default",
        tuple(applied),
        max_affected,
        (tx or tx_end.partition("-")[0]) == "rollback",
        tuple(shown),
    )


def media_type():
    """json, object (one row) or csv, from the Accept header; 406 for anything else."""
    raw = request.headers.get("Accept", "")
    header = raw.strip()
    if not header:
        return "json"
    media = best_media_type(raw)
    if media is None:
        raise APIError(406, Rest.NOT_ACCEPTABLE, f"None of these media types are available: {header[:100]}")
    return media


@functools.lru_cache(maxsize=128)
def best_media_type(accept):
    """The media type an Accept header asks for, or None; each header is parsed once, as Prefer is."""
    best = accepted(accept)
    return None if best is None else MEDIA_TYPES[best]


@functools.lru_cache(maxsize=128)
def accepted(accept):
    """The one of MEDIA_TYPES an Accept header picks, or None."""
    return parse_accept_header(accept, MIMEAccept).best_match(list(MEDIA_TYPES))


def paging_parameter(args, name):
    """limit= or offset= of the query string `args`: a non-negative integer, or None when absent."""
    raw = args.get(name)
    if raw is None:
        return None
    if not NUMBER.fullmatch(raw):
        raise bad_query(f'"{name}" must be a non-negative integer, not "{raw[:40]}"')
    return int(raw)


# The table reads parse_read made, by what they were made of: a client sends the same read again
# and again (a row by its key, a page it polls), and its parse was a quarter of a key read.
READS = {}
MAX_KEPT = 1024  # parses kept in READS, and in WRITES; past that the cache starts afresh
MAX_KEPT_QUERY = 2048  # characters: a longer query string is parsed every time, never kept


def keep(cache, key, query, parsed):
    """`parsed` kept in `cache` (READS, WRITES) under `key`, unless its query string is too long to
    be worth keeping; a full cache starts afresh."""
    if len(query) <= MAX_KEPT_QUERY:
        if len(cache) >= MAX_KEPT:
            cache.clear()
        cache[key] = parsed


def parse_read(exclude=()):
    """The query, and limit and offset intersected with a Range header, capped at MAX_ROWS.
    `exclude`: query parameters that are not filters (a function's arguments). A table's read
    (nothing excluded) is parsed once per query string, headers and settings it is made of: the
    parse reads nothing else (no table, no caller), and a Read is immutable. What does not parse
    raises every time, and is never kept."""
    asked = request._get_current_object()  # one lookup behind the proxy (gateway.before)
    if exclude:
        return _parse_read(asked, exclude)
    environ, config = asked.environ, current_app._get_current_object().config
    query = environ.get("QUERY_STRING", "")
    key = (
        query,
        environ.get("HTTP_RANGE"),
        environ.get("HTTP_RANGE_UNIT"),
        environ.get("HTTP_PREFER"),  # werkzeug's headers read these environ keys, and nothing else
        environ.get("HTTP_ACCEPT"),
        config["MAX_ROWS"],
        config["DB_TX_END"],
        config["DB_AGGREGATES_ENABLED"],
    )
    found = READS.get(key)
    if found is None:
        found = _parse_read(asked, exclude)
        keep(READS, key, query, found)
    return found


def _parse_read(asked, exclude):
    args = asked.args
    pairs = [(key, value) for key, value in args.items(multi=True) if key not in exclude]
    query = parse_query(pairs, args.get("select"), args.get("order"))
    offset = paging_parameter(args, "offset") or 0
    limit = paging_parameter(args, "limit")
    upper = None if limit is None else offset + limit - 1
    header = asked.headers.get("Range")
    if header is not None:
        unit = asked.headers.get("Range-Unit", "items").strip().lower()
        found = RANGE.fullmatch(header.strip())
        if unit != "items" or found is None:
            raise bad_range(f'malformed Range header "{header[:40]}"', hint='use "Range: 0-9"')
        first, last = int(found.group(1)), found.group(2)
        if last is not None and int(last) < first:
            raise bad_range(f'malformed Range header "{header[:40]}": the end is before the start')
        offset = max(offset, first)
        if last is not None:
            upper = int(last) if upper is None else min(upper, int(last))
    limit = None if upper is None else max(upper - offset + 1, 0)
    maximum = current_app.config["MAX_ROWS"]
    limit = maximum if limit is None else min(limit, maximum)
    prefer = preferences()
    return rows.Read(query, offset, limit, prefer.count, media_type(), prefer)


def bad_range(message, hint=None):
    return APIError(400, Rest.RANGE_NOT_SATISFIABLE, message, hint=hint)


def names_parameter(name):
    """columns= or on_conflict=: a tuple of column names, or None when absent."""
    raw = request.args.get(name)
    if raw is None:
        return None
    names = tuple(part.strip().strip('"') for part in raw.split(","))
    if not all(names):
        raise bad_query(f'"{name}" must be a comma-separated list of column names')
    return names


# What parse_write made of a write's query string and headers, by what it was made of: a client
# sends the same insert again and again, and only its body differs. Kept as READS are.
WRITES = {}


def parse_write(array=False, filtered=False, body=True):
    """A write request: filters (required for PATCH and DELETE), preferences and the body's rows.
    All but the body is parsed once per query string, headers and settings it is made of (it reads
    nothing else, and a Write's parts are never changed), and kept only when all of it parsed: a
    request found there can only fail on its body, as it would have."""
    asked = request._get_current_object()  # one lookup behind the proxy (gateway.before)
    environ, config = asked.environ, current_app._get_current_object().config
    query = environ.get("QUERY_STRING", "")
    key = (
        asked.method,
        array,
        filtered,
        body,
        query,
        environ.get("HTTP_PREFER"),
        environ.get("HTTP_ACCEPT"),
        config["DB_TX_END"],
        config["DB_AGGREGATES_ENABLED"],
    )
    head = WRITES.get(key)
    if head is None:
        write = _parse_write(array, filtered, body)
        keep(WRITES, key, query, dataclasses.replace(write, rows=[]))
        return write
    objects = body_objects(array) if body else []
    check_keys_match(objects, head.columns_param, head.prefer)
    return dataclasses.replace(head, rows=objects)


def check_keys_match(objects, columns, prefer):
    if columns is None and len({frozenset(row) for row in objects}) > 1 and not prefer.missing_default:
        # With missing=default each row's missing keys take their column's default, so they may differ.
        raise bad_body("All object keys must match", hint="or name the columns with ?columns=")


def _parse_write(array, filtered, body):
    for reserved in ("limit", "offset", "order"):
        if reserved in request.args:
            raise bad_query(f'"{reserved}" is not supported on {request.method}')
    prefer = preferences()
    query = parse_query(request.args.items(multi=True), request.args.get("select"))
    if query.filters and not filtered:
        raise bad_query(f"filters are not supported on {request.method}")
    if filtered and not query.filters:
        raise APIError(
            400,
            Rest.FILTER_REQUIRED,
            f"{request.method} requires a filter",
            hint="add a filter such as ?id=eq.1; to touch every row, filter on a column every row has",
        )
    objects = body_objects(array) if body else []
    columns = names_parameter("columns")
    check_keys_match(objects, columns, prefer)
    return rows.Write(query, prefer, media_type(), objects, columns, names_parameter("on_conflict"))


def json_body(empty=None):
    """The request body as strict JSON (`empty` when there is none): nothing the database could not
    store or that takes unbounded work to walk."""
    raw = request.get_data(cache=False)
    try:
        return strict_json(raw) if raw.strip() else empty
    except ValueError:
        raise bad_body(
            "Could not parse the request body as JSON",
            hint=f"NaN, Infinity, 1e999, unpaired surrogates and nesting deeper than {MAX_DEPTH} are refused",
        ) from None


def body_objects(array):
    """The JSON body as a list of objects: an object (or, when `array`, an array of objects)."""
    data = json_body()
    if isinstance(data, dict) and (array or data):
        return [data]
    if array and isinstance(data, list) and all(isinstance(row, dict) for row in data):
        return data
    expected = "a JSON object or an array of objects" if array else "a JSON object with the columns to change"
    raise bad_body(f"The request body must be {expected}")
