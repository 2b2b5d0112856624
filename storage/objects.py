"""Objects: upload, replace, read and sign, with their metadata in minibase_storage_objects and their
bytes in the backend (files.py); listing.py lists them, transfers.py moves, copies and removes
them. Every operation asks buckets.authorize first; an object the caller may not see answers
exactly as a missing one."""

import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from config import setting
from database import statements, transactions
from errors import APIError, Storage, invalid_request, object_not_found, object_too_large, storage_error
from extensions import db, state
from models.storage import StorageBucket, StorageObject
from storage import buckets, clock, files, media_types, signing

MAX_NAME_CHARACTERS = 512
MAX_NAME_BYTES = 1024
MAX_LIST = 1000  # names in a list or a batch of signed URLs
NOT_SIGNED = "Either the object does not exist or you do not have access to it"


@dataclass
class Upload:
    """What a client sends with an object's bytes: `stream` is read once, chunk by chunk."""

    stream: object
    mimetype: str
    cache_control: str = "no-cache"
    user_metadata: dict | None = None


@dataclass(frozen=True)
class Stored:
    """An object's metadata, as the downloads and info need it."""

    id: str
    bucket_id: str
    name: str
    storage_key: str
    size: int
    mimetype: str
    cache_control: str
    etag: str
    user_metadata: dict | None
    created_at: object
    updated_at: object

    @classmethod
    def of(cls, row):
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})


# --- names


def check_name(name):
    """`name` as an object's name, or a 400: no empty, '.' or '..' segment, no leading slash, no
    control character, backslash or undecodable byte, at most 512 characters and 1024 UTF-8 bytes."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARACTERS:
        raise invalid_key(name)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid_key(name) from None
    if size > MAX_NAME_BYTES or any(ord(c) < 32 or c in "\x7f\\\ufffd" for c in name):
        raise invalid_key(name)
    if any(segment in ("", ".", "..") for segment in name.split("/")):
        raise invalid_key(name)
    return name


def invalid_key(name):
    shown = name[:100].encode("utf-8", "replace").decode("utf-8") if isinstance(name, str) else ""
    shown = "".join(c if c.isprintable() else "?" for c in shown)
    return storage_error(400, Storage.INVALID_KEY, f"Invalid key: {shown}")


# --- uploads


def file_size_limit(bucket):
    limit = setting("STORAGE_FILE_SIZE_LIMIT")
    return min(limit, bucket.file_size_limit) if bucket.file_size_limit else limit


def check_content(bucket, mimetype, size=None):
    """What `bucket` takes of any object written into it, by upload, copy or move: a 415 unless its
    allowed_mime_types admit `mimetype` (`image/*` admits every image type), a 413 when `size` is past
    its limit (an upload's body is counted as it streams in, against file_size_limit)."""
    allowed = bucket.allowed_mime_types
    essence = media_types.essence(mimetype)
    if allowed and essence not in allowed and f"{essence.partition('/')[0]}/*" not in allowed:
        raise storage_error(
            415, Storage.INVALID_MIME_TYPE, f"mime type {essence} is not supported", "invalid_mime_type"
        )
    if size is not None and size > file_size_limit(bucket):
        raise object_too_large()


def bucket_for(bucket_id):
    return buckets.read(bucket_id)


def upload(bucket_id, name, who, body, upsert=False, replace=False):
    """Store an object as `who` (POST: new, or replacing one with `upsert`; PUT, `replace`: an
    existing one). The one way an object's bytes are written: a direct upload, and a signed upload as
    the user who signed it."""
    check_name(name)
    bucket = bucket_for(bucket_id)
    buckets.require(bucket, "update" if replace else "insert", who)  # before a byte is received
    check_content(bucket, body.mimetype)
    backend = files.backend()
    received = files.receive(body.stream, file_size_limit(bucket), files.staging_directory())
    key = files.new_key()
    try:
        stored = store(backend, backend, bucket, name, who, body, received, key, upsert, replace)
    finally:
        received.discard()
    return {"Id": stored, "Key": f"{bucket_id}/{name}"}


def store(backend, placer, bucket, name, who, body, received, key, upsert, replace):
    """Record the object whose bytes `placer` puts under `key` (_record, one transaction): the id of
    its row. When that fails the bytes go; when it commits, those of the object it replaced."""
    try:
        stored, replaced = transactions.write(
            _record, bucket, name, who, body, received, key, upsert, replace, placer
        )
    except sa.exc.IntegrityError:
        backend.delete(key)
        raise already_exists() from None
    except BaseException:
        backend.delete(key)
        raise
    if replaced:
        backend.delete(replaced)
    return stored


def already_exists():
    return storage_error(409, Storage.KEY_ALREADY_EXISTS, "The resource already exists", "Duplicate")


def locked(bucket_id, name):
    query = sa.select(StorageObject).where(StorageObject.bucket_id == bucket_id, StorageObject.name == name)
    return db.session.scalars(query.with_for_update()).first()


def writable(bucket, name, who, upsert=False, replace=False):
    """(the object named `name`, locked, or None; the Access by which `who` may write that name),
    inside the caller's transaction: insert for a new name, update for an existing one (with
    `upsert` or `replace`, and only one the update rule reaches); otherwise the error a direct
    upload answers. Uploads, signed uploads (when signed and when used), copies and moves all ask."""
    existing = locked(bucket.id, name)
    if existing is None and replace:
        raise object_not_found()
    if existing is not None and not (upsert or replace):
        raise already_exists()
    access = buckets.authorize(bucket, "insert" if existing is None else "update", who)
    if access is None or (existing is not None and not access.reaches(existing)):
        raise object_not_found() if replace else buckets.denied(who)
    return existing, access


def owner_of(who):
    """What an object `who` writes records as its owner: the user's id; None for an API key."""
    return str(who.user_id) if who.user_id is not None else None


def _record(bucket, name, who, body, received, key, upsert, replace, backend):
    existing, access = writable(bucket, name, who, upsert, replace)
    now = clock.now()
    values = {
        "owner": owner_of(who),
        "storage_key": key,
        "size": received.size,
        "mimetype": body.mimetype,
        "cache_control": body.cache_control,
        "etag": received.md5,
        "user_metadata": body.user_metadata,
        "updated_at": now,
    }
    replaced = None
    if existing is None:
        existing = StorageObject(
            id=str(uuid.uuid4()), bucket_id=bucket.id, name=name, created_at=now, **values
        )
        db.session.add(existing)
    else:
        replaced = existing.storage_key
        for column, value in values.items():
            setattr(existing, column, value)
    db.session.flush()
    access.check_written(existing.id)
    backend.place(received, key)  # last: the bytes are in place when the row that names them commits
    return existing.id, replaced


# --- reading


def find(bucket_id, name, who, public=False, signed=False):
    """The metadata of an object `who` may read: through the bucket's select rule, or any object
    of a public bucket (`public`), or the object a verified token names (`signed`). One prepared
    statement, the rule in its WHERE, unless a row policy chooses the objects (`find_by_policy`)."""
    check_name(name)
    if not buckets.BUCKET_ID.fullmatch(bucket_id or ""):
        raise object_not_found()
    values = {"bucket_id": bucket_id, "name": name, "owner": None}
    if public:
        kind = "public"
    elif signed:
        kind = "any"
    else:
        # The rule is tables.toml's for this bucket id, known without its row: a bucket that does not
        # exist has no objects, so the statement finds none and the answer is the same 404.
        declared = buckets.declared().get(bucket_id)
        rules = buckets.Bucket(
            bucket_id, False, None, None,
            dict(declared.rules) if declared else {}, dict(declared.policies) if declared else {},
        )  # fmt: skip
        access = buckets.authorize(rules, "select", who)
        if access is None:
            raise object_not_found()
        if access.using is not None:
            return find_by_policy(bucket_id, name, who)
        kind = "any" if access.owner is None else "owner"
        values["owner"] = access.owner
    found = statements.prepared(values, prepared_find(kind))[0]
    if not found:
        raise object_not_found()
    return Stored.of(found[0])


STORED_COLUMNS = tuple(Stored.__dataclass_fields__)


def prepared_find(kind):
    """The statement that reads an object's metadata by bucket and name, prepared once per app for
    each kind of rule: `any` object, the `owner`'s only, any in a bucket that is `public` now."""
    cache = state()
    statement = cache.object_reads.get(kind)
    if statement is None:
        objects = StorageObject.__table__
        query = sa.select(*(objects.c[name] for name in STORED_COLUMNS)).where(
            objects.c.bucket_id == sa.bindparam("bucket_id", required=True),
            objects.c.name == sa.bindparam("name", required=True),
        )
        if kind == "owner":
            query = query.where(objects.c.owner == sa.bindparam("owner", required=True))
        elif kind == "public":
            bucket = StorageBucket.__table__
            query = query.join(bucket, bucket.c.id == objects.c.bucket_id).where(bucket.c.public.is_(True))
        statement = cache.object_reads[kind] = statements.prepare(query, cache.reads or db.engine)
    return statement


def find_by_policy(bucket_id, name, who):
    """find() in a bucket whose row policy chooses the objects `who` may read: the bucket's row,
    then the object under the policy's condition, in one read transaction."""

    def work():
        try:
            bucket = buckets.find(bucket_id)
        except APIError:
            raise object_not_found() from None
        query = sa.select(StorageObject).where(
            StorageObject.bucket_id == bucket_id, StorageObject.name == name
        )
        access = buckets.authorize(bucket, "select", who)
        if access is None:
            raise object_not_found()
        if access.condition() is not None:
            query = query.where(access.condition())
        row = db.session.scalars(query).first()
        if row is None:
            raise object_not_found()
        return Stored.of(row)

    return transactions.read(work)


def open_object(bucket_id, name, who, public=False, signed=False):
    """(metadata, open binary file) of an object; the file is the caller's to close. A replace that
    removed the bytes between the two reads is met by reading again."""
    for _ in range(3):
        stored = find(bucket_id, name, who, public, signed)
        try:
            return stored, files.backend().open(stored.storage_key)
        except FileNotFoundError:
            continue
    raise object_not_found()


def system_metadata(stored):
    """The `metadata` Supabase Storage shows with an object."""
    return {
        "eTag": f'"{stored.etag}"',
        "size": stored.size,
        "mimetype": stored.mimetype,
        "cacheControl": stored.cache_control,
        "lastModified": clock.iso(stored.updated_at),
        "contentLength": stored.size,
        "httpStatusCode": 200,
    }


def info(stored):
    """GET /object/info: the object as Supabase Storage describes it."""
    return {
        "id": stored.id,
        "name": stored.name,
        "version": stored.storage_key,
        "bucket_id": stored.bucket_id,
        "size": stored.size,
        "content_type": stored.mimetype,
        "cache_control": stored.cache_control,
        "etag": f'"{stored.etag}"',
        "metadata": stored.user_metadata or {},
        "last_modified": clock.iso(stored.updated_at),
        "created_at": clock.iso(stored.created_at),
    }


# --- signed URLs


def sign_download(bucket_id, name, who, expires_in, transform=None):
    """A signed download URL; with `transform` (an images.Transform), one of the resized image. The
    request is checked before the object is looked up, as Supabase's schema checks it."""
    lifetime = signing.lifetime(expires_in)
    find(bucket_id, name, who)
    if transform is None:
        token = signing.sign(bucket_id, name, signing.DOWNLOAD, lifetime)
        return {"signedURL": f"/object/sign/{bucket_id}/{name}?token={token}"}
    wanted = {key: value for key, value in vars(transform).items() if value is not None}
    token = signing.sign(bucket_id, name, signing.DOWNLOAD, lifetime, transform=wanted)
    return {"signedURL": f"/render/image/sign/{bucket_id}/{name}?token={token}"}


def sign_downloads(bucket_id, names, who, expires_in):
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not 0 < len(names) <= MAX_LIST
    ):
        raise invalid_request(f"paths must be a list of 1 to {MAX_LIST} object names")
    lifetime = signing.lifetime(expires_in)
    signed = []
    for name in names:
        try:
            find(bucket_id, name, who)
        except APIError:
            signed.append({"error": NOT_SIGNED, "path": name, "signedURL": None})
            continue
        token = signing.sign(bucket_id, name, signing.DOWNLOAD, lifetime)
        signed.append(
            {"error": None, "path": name, "signedURL": f"/object/sign/{bucket_id}/{name}?token={token}"}
        )
    return signed


def sign_upload(bucket_id, name, who, upsert=False):
    """A token for one upload of `name` without credentials, for 2 hours, as `who`: refused now when
    `who` could not upload it now, and the upload made with it is checked again as theirs."""
    check_name(name)

    def allowed():
        bucket = buckets.find(bucket_id)
        access = writable(bucket, name, who, upsert)[1]
        access.check_proposed(name, owner_of(who))

    transactions.read(allowed)
    signer = {"role": who.role, "user": owner_of(who)}
    if who.user_id is not None:
        signer.update(session=who.session_id, account=signing.account_of(who))
    token = signing.sign(
        bucket_id, name, signing.UPLOAD, signing.UPLOAD_LIFETIME, signer=signer, upsert=upsert
    )
    return {"url": f"/object/upload/sign/{bucket_id}/{name}?token={token}", "token": token}
