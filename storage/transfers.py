"""Moving, copying and removing objects: each checked as the uploads and deletes it amounts to."""

import sqlalchemy as sa

from database import transactions
from errors import invalid_request, object_not_found
from extensions import db
from models.storage import StorageObject
from storage import buckets, clock, files, media_types
from storage.objects import (
    Stored,
    Upload,
    bucket_for,
    check_content,
    check_name,
    find,
    locked,
    store,
    system_metadata,
    writable,
)

MAX_REMOVE = 1000


def _transfer_body(body):
    if not isinstance(body, dict):
        raise invalid_request("The body must be a JSON object")
    source_bucket = body.get("bucketId")
    if not all(isinstance(body.get(key), str) for key in ("bucketId", "sourceKey", "destinationKey")):
        raise invalid_request("bucketId, sourceKey and destinationKey are required")
    target_bucket = body.get("destinationBucket") or source_bucket
    if not isinstance(target_bucket, str):
        raise invalid_request("destinationBucket must be a bucket's name")
    return (
        source_bucket,
        check_name(body.get("sourceKey")),
        target_bucket,
        check_name(body.get("destinationKey")),
    )


@transactions.transactional
def move(body, who):
    """Rename an object (within its bucket or into another): the caller's update rule must reach it
    where it is, and the new name must be one they could upload to (rules, policies, the bucket's mime
    types and size limit); the object keeps its owner, bytes and metadata."""
    source_bucket, source, target_bucket, target = _transfer_body(body)
    bucket = buckets.find(source_bucket)
    access = buckets.authorize(bucket, "update", who)
    row = locked(source_bucket, source)
    if row is None or access is None or not access.reaches(row):
        raise object_not_found()
    moved_in = None
    if (target_bucket, target) != (source_bucket, source):
        destination = bucket if target_bucket == source_bucket else buckets.find(target_bucket)
        check_content(destination, row.mimetype, row.size)
        moved_in = writable(destination, target, who)[1]
    row.bucket_id, row.name, row.updated_at = target_bucket, target, clock.now()
    db.session.flush()
    access.check_written(row.id)
    if moved_in is not None:
        moved_in.check_written(row.id)
    return {"message": "Successfully moved", "Id": row.id, "Key": f"{target_bucket}/{target}"}


def copy(body, who, upsert=False):
    """A new object with another's bytes and metadata: the caller must be able to read the source
    and to upload the copy where it goes, as an upload of it would be checked."""
    source_bucket, source, target_bucket, target = _transfer_body(body)
    stored = find(source_bucket, source, who)
    destination = bucket_for(target_bucket)
    buckets.require(destination, "insert", who)
    mimetype = media_types.stored(stored.mimetype)
    check_content(destination, mimetype, stored.size)
    backend = files.backend()
    key = files.new_key()
    backend.copy(stored.storage_key, key)
    received = files.Received("", stored.size, stored.etag)
    upload = Upload(None, mimetype, stored.cache_control, stored.user_metadata)
    new_id = store(backend, _Placed(), destination, target, who, upload, received, key, upsert, False)
    return {"Id": new_id, "Key": f"{target_bucket}/{target}"}


class _Placed:
    """A backend stand-in for _record when the bytes are already under their key (a copy)."""

    def place(self, received, key):
        pass


def remove(bucket_id, names, who):
    """Delete the named objects the caller's delete rule reaches; the deleted ones, as Supabase lists them."""
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not 0 < len(names) <= MAX_REMOVE
    ):
        raise invalid_request(f"prefixes must be a list of 1 to {MAX_REMOVE} object names")

    def work():
        bucket = buckets.find(bucket_id)
        access = buckets.authorize(bucket, "delete", who)
        if access is None or not names:
            return []
        query = sa.select(StorageObject).where(
            StorageObject.bucket_id == bucket_id, StorageObject.name.in_(names)
        )
        if access.condition() is not None:
            query = query.where(access.condition())
        rows = db.session.scalars(query.with_for_update()).all()
        deleted = [(_removed(row), row.storage_key) for row in rows]
        if rows:
            db.session.execute(sa.delete(StorageObject).where(StorageObject.id.in_([row.id for row in rows])))
        return deleted

    deleted = transactions.write(work)
    backend = files.backend()
    for _, key in deleted:
        backend.delete(key)
    return [shown for shown, _ in deleted]


def _removed(row):
    stored = Stored.of(row)
    return {
        "bucket_id": row.bucket_id,
        "name": row.name,
        "id": row.id,
        "owner": row.owner,
        "owner_id": row.owner,
        "version": row.storage_key,
        "created_at": clock.iso(row.created_at),
        "updated_at": clock.iso(row.updated_at),
        "last_accessed_at": clock.iso(row.updated_at),
        "metadata": system_metadata(stored),
        "user_metadata": row.user_metadata,
    }
