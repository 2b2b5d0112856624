"""Listing a bucket's objects as Supabase's list does: the folders and objects right under a prefix,
sorted, searched and paged by the database."""

from dataclasses import dataclass

import sqlalchemy as sa

from database import transactions
from errors import invalid_request
from extensions import db
from models.storage import StorageObject
from storage import buckets, clock
from storage.objects import MAX_LIST, MAX_NAME_CHARACTERS, system_metadata

SORT_COLUMNS = ("name", "created_at", "updated_at", "last_accessed_at")


@dataclass(frozen=True)
class Listing:
    prefix: str = ""
    limit: int = 100
    offset: int = 0
    column: str = "name"
    descending: bool = False
    search: str = ""


def listing(body):
    """A list request's body, checked: prefix, limit, offset, sortBy {column, order}, search."""
    if not isinstance(body, dict):
        raise invalid_request("The body must be a JSON object")
    prefix = body.get("prefix") or ""
    search = body.get("search") or ""
    limit, offset = body.get("limit", 100), body.get("offset", 0)
    sort = body.get("sortBy") or {}
    if not isinstance(prefix, str) or not isinstance(search, str) or len(prefix) > MAX_NAME_CHARACTERS:
        raise invalid_request("prefix and search must be text")
    for value, low, high in ((limit, 1, MAX_LIST), (offset, 0, 10**9)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise invalid_request(f"limit must be 1 to {MAX_LIST} and offset at least 0")
    if not isinstance(sort, dict):
        raise invalid_request("sortBy must be an object with column and order")
    column, order = sort.get("column") or "name", sort.get("order") or "asc"
    if column not in SORT_COLUMNS or not isinstance(order, str) or order.lower() not in ("asc", "desc"):
        raise invalid_request(f"sortBy.column must be one of {', '.join(SORT_COLUMNS)}, order asc or desc")
    prefix = prefix.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return Listing(prefix, limit, offset, column, order.lower() == "desc", search)


def list_objects(bucket_id, who, request):
    """The folders and objects right under `request.prefix` (a folder is an entry without an id),
    found, sorted and paged by the database: a list costs the page it answers, not the bucket."""

    def work():
        bucket = buckets.find(bucket_id)
        access = buckets.authorize(bucket, "select", who)
        if access is None:
            return []
        return db.session.execute(_listing_query(bucket_id, request, access.condition())).all()

    return [
        _folder(row.entry) if row.id is None else _file(row.entry, row) for row in transactions.read(work)
    ]


def _listing_query(bucket_id, request, condition):
    """One page of a listing: the objects whose name, after the prefix, has no slash, and one row per
    folder (the first segment of those that have one), in the order asked (by a time, folders
    first ascending and last descending, as they have none)."""
    objects, func = StorageObject, sa.func
    rest = func.substr(objects.name, len(request.prefix) + 1)
    slash = func.instr(rest, "/")
    under = [objects.bucket_id == bucket_id]
    if request.prefix:  # LIKE finds them by the index; SQLite's LIKE ignores case, = does not
        under.append(objects.name.startswith(request.prefix, autoescape=True))
        under.append(func.substr(objects.name, 1, len(request.prefix)) == request.prefix)
    if request.search:
        under.append(func.lower(func.substr(rest, 1, len(request.search))) == request.search.lower())
    if condition is not None:
        under.append(condition)
    columns = (objects.id, objects.size, objects.mimetype, objects.cache_control, objects.etag,
               objects.created_at, objects.updated_at)  # fmt: skip
    files = sa.select(rest.label("entry"), *columns).where(*under, slash == 0)
    nothing = [sa.null().label(name) for name in ("id", "size", "mimetype", "cache_control", "etag")]
    folders = (
        sa.select(func.substr(rest, 1, slash - 1).label("entry"), *nothing, sa.null(), sa.null())
        .where(*under, slash > 0)
        .distinct()
    )
    page = sa.union_all(files, folders).subquery("entries")
    column = {"name": None, "created_at": page.c.created_at}.get(request.column, page.c.updated_at)
    keys = (
        [page.c.entry] if column is None else [sa.case((column.is_(None), 0), else_=1), column, page.c.entry]
    )
    keys.append(sa.case((page.c.id.is_(None), 0), else_=1))
    order = [key.desc() if request.descending else key.asc() for key in keys]
    return sa.select(page).order_by(*order).limit(request.limit).offset(request.offset)


def _folder(name):
    return {
        "name": name,
        "id": None,
        "updated_at": None,
        "created_at": None,
        "last_accessed_at": None,
        "metadata": None,
    }


def _file(name, row):
    updated = clock.iso(row.updated_at)
    return {
        "name": name,
        "id": row.id,
        "updated_at": updated,
        "created_at": clock.iso(row.created_at),
        "last_accessed_at": updated,
        "metadata": system_metadata(row),
    }
