"""Resumable uploads: TUS 1.0 (creation, core, termination, expiration) as Supabase Storage serves it
at /upload/resumable, for files too large to send in one request.

An upload is begun (`create`) by a caller who could upload that object now: the same checks as a
direct upload (the bucket's rules and row policies, insert or, with upsert over an existing object,
update; its mime types; its size limit and the global one, from the declared length). Its chunks
(`append`) go to the backend's uploads/ area, each a part under a random key, recorded in the
upload's row only when the row's offset is still the one the chunk was sent for: two chunks sent
for one offset cannot both land. The last chunk makes the object through objects.upload, checked
again as the caller is then, and removes the upload's row in the object's own transaction: the
object appears whole or not at all, and once. An upload belongs to who began it: anyone else meets
a 404, as for an upload that does not exist. One untouched for EXPIRY seconds expires (410), and is
removed with its parts by the next upload begun."""

import base64
import binascii
import datetime
import functools
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from database import transactions
from errors import Storage, storage_error
from extensions import db
from models.storage import StorageUpload
from storage import buckets, clock, files, objects

EXPIRY = 3600  # seconds since the upload was begun or last received a chunk, as Supabase's 1 hour
AREA = "uploads"
EXPIRED_PER_SWEEP = 100


@dataclass(frozen=True)
class Creation:
    """What a client declares when it begins an upload (its Upload-Metadata and Upload-Length)."""

    bucket_id: str
    name: str
    length: int
    upsert: bool
    upload: objects.Upload  # mimetype, cache_control, user_metadata; no stream
    metadata_header: str | None


@dataclass(frozen=True)
class Progress:
    """Where an upload stands: the bytes received of `length`, until `expires_at`; `done` once the
    object is made."""

    upload_id: str
    received: int
    length: int
    expires_at: datetime.datetime | None
    metadata_header: str | None = None
    done: bool = False


def parts():
    """Where the parts of uploads in progress live: beside the objects, in the same backend."""
    return files.backend().beside(AREA)


# --- upload ids: the URL's last segment, as Supabase makes it (base64url of bucket/name/version)


def upload_id(row):
    text = f"{row.bucket_id}/{row.name}/{row.id}"
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def parse_id(value):
    """(bucket, name, version) of an upload id, or None for one that is not ours."""
    if not isinstance(value, str) or not 0 < len(value) <= 2048:
        return None
    try:
        text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    bucket_id, _, rest = text.partition("/")
    name, _, version = rest.rpartition("/")
    return (bucket_id, name, version) if bucket_id and name and version else None


def not_found():
    return storage_error(404, Storage.NOT_FOUND, "Upload not found", "not_found")


def conflict(message="Upload-Offset does not match the upload's offset"):
    return storage_error(409, Storage.INVALID_REQUEST, message, "Conflict")


def _owner(who):
    return objects.owner_of(who)


def _find(value, who, lock=False):
    """The upload `value` names, begun by `who`, in the caller's transaction; a 404 for any other (a
    forged id, another caller's upload, one finished or terminated), a 410 once it has expired."""
    parsed = parse_id(value)
    if parsed is None:
        raise not_found()
    bucket_id, name, version = parsed
    row = db.session.get(StorageUpload, version, with_for_update=lock)
    if row is None or (row.bucket_id, row.name) != (bucket_id, name):
        raise not_found()
    if row.role != who.role or row.owner != _owner(who):
        raise not_found()
    if row.expires_at <= clock.now():
        raise storage_error(410, Storage.NOT_FOUND, "The upload has expired", "Gone")
    return row


# --- creation


def create(who, creation):
    """Begin an upload of `creation` as `who`, when they could upload that object now: the Progress
    of the new upload (nothing received yet)."""
    expire_abandoned()
    objects.check_name(creation.name)
    upload = creation.upload

    def work():
        bucket = buckets.find(creation.bucket_id)
        buckets.require(bucket, "insert", who)
        objects.check_content(bucket, upload.mimetype, creation.length)
        access = objects.writable(bucket, creation.name, who, upsert=creation.upsert)[1]
        access.check_proposed(creation.name, _owner(who))
        now = clock.now()
        row = StorageUpload(
            id=str(uuid.uuid4()),
            bucket_id=bucket.id,
            name=creation.name,
            role=who.role,
            owner=_owner(who),
            upsert=creation.upsert,
            length=creation.length,
            received=0,
            parts=[],
            mimetype=upload.mimetype,
            cache_control=upload.cache_control,
            user_metadata=upload.user_metadata,
            upload_metadata=creation.metadata_header,
            created_at=now,
            expires_at=now + datetime.timedelta(seconds=EXPIRY),
        )
        db.session.add(row)
        return Progress(upload_id(row), 0, row.length, row.expires_at, row.upload_metadata)

    return transactions.write(work)


# --- core: where it stands, and the next chunk


def status(value, who):
    def work():
        row = _find(value, who)
        return Progress(value, row.received, row.length, row.expires_at, row.upload_metadata)

    return transactions.read(work)


@dataclass(frozen=True)
class _Snapshot:
    id: str
    bucket_id: str
    name: str
    upsert: bool
    length: int
    received: int
    parts: tuple
    upload: objects.Upload


def _snapshot(value, who):
    row = _find(value, who)
    upload = objects.Upload(None, row.mimetype, row.cache_control, row.user_metadata)
    return _Snapshot(row.id, row.bucket_id, row.name, row.upsert, row.length, row.received,
                     tuple(row.parts), upload)  # fmt: skip


def append(value, who, offset, stream, declared=None):
    """Receive the chunk `stream` at `offset` of the upload `value` (a 409 unless that is where it
    stands; a 413 when it would go past the declared length: `declared` is the chunk's
    Content-Length, refused before a byte is read). The last chunk makes the object. Its Progress."""
    upload = transactions.read(_snapshot, value, who)
    if offset != upload.received:
        raise conflict()
    remaining = upload.length - offset
    if declared is not None and declared > remaining:
        raise past_length(upload.length)
    received = files.receive(stream, remaining, files.staging_directory())
    try:
        if offset + received.size < upload.length:
            return _keep(upload, value, offset, received)
        return _finish(upload, value, who, offset, received)
    finally:
        received.discard()


def past_length(length):
    return storage_error(
        413,
        Storage.ENTITY_TOO_LARGE,
        f"The chunk goes past the upload's length ({length} bytes)",
        "Payload too large",
    )


def _keep(upload, value, offset, received):
    """A chunk that does not end the upload: a part, recorded if the upload is still at `offset`."""
    if received.size == 0:
        return Progress(value, offset, upload.length, None)
    key = files.new_key()
    store = parts()
    store.place(received, key)

    def record():
        row = db.session.get(StorageUpload, upload.id, with_for_update=True)
        if row is None:
            raise not_found()
        if row.received != offset:
            raise conflict()
        row.parts = [*row.parts, key]
        row.received = offset + received.size
        row.expires_at = clock.now() + datetime.timedelta(seconds=EXPIRY)
        return Progress(value, row.received, row.length, row.expires_at)

    try:
        return transactions.write(record)
    except BaseException:
        store.delete(key)
        raise


def _finish(upload, value, who, offset, received):
    """The last chunk: the object, from the parts and this chunk, uploaded as `who` with the checks
    of a direct upload, and the upload's row removed in the object's transaction (only if it is
    still at `offset`: of two last chunks sent at once, one makes the object)."""
    store = parts()

    def remove_upload():
        row = db.session.get(StorageUpload, upload.id, with_for_update=True)
        if row is None:
            raise not_found()
        if row.received != offset:
            raise conflict()
        db.session.delete(row)

    pieces = [functools.partial(store.open, key) for key in upload.parts]
    pieces.append(functools.partial(open, received.path, "rb"))
    body = objects.Upload(Joined(pieces), upload.upload.mimetype, upload.upload.cache_control,
                          upload.upload.user_metadata)  # fmt: skip
    try:
        with transactions.alongside(remove_upload):
            objects.upload(upload.bucket_id, upload.name, who, body, upsert=upload.upsert)
    finally:
        body.stream.close()
    for key in upload.parts:
        store.delete(key)
    return Progress(value, upload.length, upload.length, None, done=True)


class Joined:
    """Several streams read as one, in order: `openers` make them, each opened when reached and
    closed when read (an upload sent in small chunks has thousands of parts). A part that is gone
    was removed with its upload, finished or terminated by another request meanwhile: a 404."""

    def __init__(self, openers):
        self.openers = list(openers)
        self.current = None

    def read(self, size=-1):
        while True:
            if self.current is None:
                if not self.openers:
                    return b""
                try:
                    self.current = self.openers.pop(0)()
                except FileNotFoundError:
                    raise not_found() from None
            chunk = self.current.read(size)
            if chunk:
                return chunk
            self.close()

    def close(self):
        if self.current is not None:
            self.current.close()
            self.current = None


# --- termination and expiration


def terminate(value, who):
    """Abandon the upload `value`: its row and its parts go."""

    def work():
        row = _find(value, who, lock=True)
        keys = list(row.parts)
        db.session.delete(row)
        return keys

    store = parts()
    for key in transactions.write(work):
        store.delete(key)


def expire_abandoned():
    """Remove up to EXPIRED_PER_SWEEP expired uploads and their parts; how many were removed. Found
    by a plain read, then locked by id: no range lock on the index that would hold up new uploads."""
    now, limit = clock.now(), EXPIRED_PER_SWEEP

    def expired():
        query = sa.select(StorageUpload.id).where(StorageUpload.expires_at <= now)
        return db.session.scalars(query.order_by(StorageUpload.expires_at).limit(limit)).all()

    ids = transactions.read(expired)
    if not ids:
        return 0

    def work():
        query = sa.select(StorageUpload).where(StorageUpload.id.in_(ids), StorageUpload.expires_at <= now)
        rows = db.session.scalars(query.with_for_update()).all()
        for row in rows:
            db.session.delete(row)
        return len(rows), [key for row in rows for key in row.parts]

    removed, keys = transactions.write(work)
    store = parts()
    for key in keys:
        store.delete(key)
    return removed
