"""POST /object/list-v2/{bucket}: Supabase Storage's listing by cursor. Names are whole paths under a
prefix matched as text ("fo" finds "folder/"); with `with_delimiter`, what lies deeper than the
prefix's next "/" is one folder entry ("folder/"). One statement finds, sorts and pages the entries
with the caller's select rule in its WHERE; a cursor only says where the next page starts."""

import base64
import binascii
import datetime
from dataclasses import dataclass

import sqlalchemy as sa

from database import transactions
from errors import Storage, invalid_request, storage_error
from extensions import db
from models.storage import StorageObject
from storage import buckets, clock
from storage.objects import MAX_NAME_CHARACTERS, system_metadata

MAX_PAGE = 1000  # as Supabase: a larger limit lists this many
SORT_COLUMNS = ("name", "updated_at", "created_at")
ORDERS = ("asc", "desc")
# The lines of a cursor, as Supabase Storage writes them: "l:<start after>\no:<order>\nc:<column>\na:<time>".
CURSOR_PARTS = {"l": "after", "o": "order", "c": "column", "a": "moment"}
MAX_CURSOR = 4096


@dataclass(frozen=True)
class Page:
    """A list-v2 request, checked: where a cursor was given, its order and column win over sortBy's."""

    prefix: str = ""
    limit: int = MAX_PAGE
    delimited: bool = False
    column: str = "name"
    order: str = "asc"
    after: str | None = None  # the sort key of the last entry of the page before
    moment: datetime.datetime | None = None  # and its time, when sorted by a time


def page(body):
    """The body storage-js's listV2 sends: prefix, limit, cursor, with_delimiter, sortBy {column,
    order}; a 400 for what Supabase's schema refuses (and for a cursor it did not write)."""
    prefix, limit, cursor = body.get("prefix", ""), body.get("limit", MAX_PAGE), body.get("cursor")
    delimited, sort = body.get("with_delimiter", False), body.get("sortBy")
    if not isinstance(prefix, str) or len(prefix) > MAX_NAME_CHARACTERS:
        raise invalid_request(f"prefix must be text of at most {MAX_NAME_CHARACTERS} characters")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise invalid_request("limit must be an integer of at least 1")
    if not isinstance(delimited, bool):
        raise invalid_request("with_delimiter must be true or false")
    if sort is None:
        sort = {"column": "name"}
    if not isinstance(sort, dict) or sort.get("column") not in SORT_COLUMNS:
        raise invalid_request(f"sortBy.column must be one of {', '.join(SORT_COLUMNS)}")
    if sort.get("order", "asc") not in ORDERS:
        raise invalid_request("sortBy.order must be asc or desc")
    wanted = {"column": sort["column"], "order": sort.get("order", "asc")}
    if cursor is not None:
        wanted = _cursor(cursor, wanted)
    return Page(prefix, min(limit, MAX_PAGE), delimited, **wanted)


def _cursor(token, wanted):
    """`wanted` (column and order) with what a cursor says over it, each part checked: a cursor is
    the client's to keep, and so to forge."""
    try:
        if not isinstance(token, str) or len(token) > MAX_CURSOR:
            raise ValueError
        text = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
        parts = {CURSOR_PARTS[key]: value for key, value in (line.split(":", 1) for line in text.split("\n"))}
        said = {**wanted, **parts}
        if said["order"] not in ORDERS or said["column"] not in SORT_COLUMNS or "after" not in said:
            raise ValueError
        if said["column"] == "name":
            said.pop("moment", None)
        else:
            moment = datetime.datetime.fromisoformat(said["moment"])  # as clock.iso wrote it: UTC
            said["moment"] = moment.astimezone(datetime.UTC).replace(tzinfo=None) if moment.tzinfo else moment
    except (ValueError, KeyError, TypeError, UnicodeError, binascii.Error, OverflowError):
        raise storage_error(400, Storage.INVALID_PARAMETER, "Invalid Parameter continuation token") from None
    return said


def _encode(request, last):
    """The cursor of the page after the one that ends with `last` (Supabase Storage's own format)."""
    parts = {"l": last.sort_key, "o": request.order, "c": request.column}
    if request.column != "name":
        parts["a"] = clock.iso(getattr(last, request.column))
    return base64.b64encode("\n".join(f"{k}:{v}" for k, v in parts.items()).encode("utf-8")).decode("ascii")


def list_page(bucket_id, who, request):
    """One page of the bucket's entries under `request.prefix` that `who` may read."""

    def work():
        bucket = buckets.find(bucket_id)
        access = buckets.authorize(bucket, "select", who)
        if access is None:
            return []
        return db.session.execute(_query(bucket_id, request, access.condition())).all()

    rows = transactions.read(work)
    shown = rows[: request.limit]
    answer = {
        "hasNext": len(rows) > request.limit,
        "folders": [_folder(row, request) for row in shown if row.id is None],
        "objects": [_object(row, request) for row in shown if row.id is not None],
    }
    if answer["hasNext"]:
        answer["nextCursor"] = _encode(request, shown[-1])
        answer["nextCursorKey"] = shown[-1].sort_key.removesuffix("/")
    return answer


def _query(bucket_id, request, condition):
    """The entries past the cursor, sorted, one more than a page (to know whether another follows).
    A folder's sort key is its name with its "/", so it sorts where its first object would."""
    objects, func = StorageObject, sa.func
    under = [objects.bucket_id == bucket_id]
    if request.prefix:  # LIKE finds them by the index; SQLite's LIKE ignores case, = does not
        under.append(objects.name.startswith(request.prefix, autoescape=True))
        under.append(func.substr(objects.name, 1, len(request.prefix)) == request.prefix)
    if condition is not None:
        under.append(condition)
    columns = (objects.id, objects.size, objects.mimetype, objects.cache_control, objects.etag,
               objects.created_at, objects.updated_at)  # fmt: skip
    if not request.delimited:
        entries = sa.select(objects.name.label("sort_key"), *columns).where(*under)
    else:
        slash = func.instr(func.substr(objects.name, len(request.prefix) + 1), "/")
        files = sa.select(objects.name.label("sort_key"), *columns).where(*under, slash == 0)
        folder = func.substr(objects.name, 1, len(request.prefix) + slash)
        first = func.min(objects.created_at)  # a folder's times, as Supabase gives them: its first object's
        nothing = [sa.null().label(name) for name in ("id", "size", "mimetype", "cache_control", "etag")]
        folders = (
            sa.select(
                folder.label("sort_key"), *nothing, first.label("created_at"), first.label("updated_at")
            )
            .where(*under, slash > 0)
            .group_by(folder)
        )
        entries = sa.union_all(files, folders)
    entries = entries.subquery("entries")
    key = entries.c.sort_key
    time = None if request.column == "name" else entries.c[request.column]
    ascending = request.order == "asc"
    query = sa.select(entries)
    if request.after is not None:
        past = key > request.after if ascending else key < request.after
        if time is not None:
            later = time > request.moment if ascending else time < request.moment
            past = sa.or_(later, sa.and_(time == request.moment, past))
        query = query.where(past)
    keys = [key] if time is None else [time, key]
    return query.order_by(*(k.asc() if ascending else k.desc() for k in keys)).limit(request.limit + 1)


def _key(name, request):
    """Supabase's `key`: the segment of the name at the prefix's depth."""
    segments = name.split("/")
    depth = len(request.prefix.split("/"))
    return segments[depth - 1] if depth <= len(segments) else ""


def _folder(row, request):
    by_time = request.column != "name"
    return {
        "key": _key(row.sort_key.removesuffix("/"), request),
        "name": row.sort_key,
        "id": None,
        "updated_at": clock.iso(row.updated_at) if by_time else None,
        "created_at": clock.iso(row.created_at) if by_time else None,
        "last_accessed_at": None,
        "metadata": None,
    }


def _object(row, request):
    updated = clock.iso(row.updated_at)
    shown = {
        "name": row.sort_key,
        "id": row.id,
        "updated_at": updated,
        "created_at": clock.iso(row.created_at),
        "last_accessed_at": updated,
        "metadata": system_metadata(row),
    }
    return {"key": _key(row.sort_key, request), **shown} if request.delimited else shown
