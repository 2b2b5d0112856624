"""Buckets: those tables.toml declares (tables_toml/buckets.py: who may do what, made or updated at
start) and the bucket API's work. The one place a storage rule is decided: `authorize` answers an
Access, and an Access's condition keeps an owner to the objects they uploaded."""

import threading
from dataclasses import dataclass, field

import sqlalchemy as sa

from database import statements, transactions
from errors import Storage, bucket_not_found, invalid_request, storage_error
from extensions import db, state
from models import upsert
from models.storage import StorageBucket, StorageObject
from row_policies import RowPolicy, applying, check_compiles
from storage import clock
from tables_toml.buckets import BUCKET_ID, MIME_PATTERN
from variables import parse_size

_synced_lock = threading.Lock()


@dataclass(frozen=True)
class Bucket:
    """A bucket as the services use it: its row's settings and tables.toml's rules (none for a bucket
    the API made: the service_role's alone)."""

    id: str
    public: bool
    file_size_limit: int | None
    allowed_mime_types: tuple | None
    rules: dict = field(default_factory=dict)
    policies: dict = field(default_factory=dict)  # operation -> RowPolicy ([buckets.NAME.policies])


@dataclass(frozen=True)
class Access:
    """Permission for one operation in a bucket: `owner` set means only the objects that user
    uploaded; `using`, the row policy that chooses the objects it reaches; `check`, the one an object
    it writes must pass; `values`, the policies' parameters for this caller."""

    bucket: Bucket
    owner: str | None = None
    using: RowPolicy | None = None
    check: RowPolicy | None = None
    values: dict = field(default_factory=dict)

    def condition(self):
        """The WHERE condition of the objects this access reaches, or None for all of the bucket's."""
        conditions = []
        if self.owner is not None:
            conditions.append(StorageObject.owner == self.owner)
        if self.using is not None:
            view = policy_view()
            chosen = sa.select(view.c.id).where(self.using.clause(view, self.values))
            conditions.append(StorageObject.id.in_(chosen))
        return sa.and_(*conditions) if conditions else None

    def reaches(self, row):
        """Whether the object `row` (in the caller's transaction) is one this access reaches."""
        if self.owner is not None and row.owner != self.owner:
            return False
        return self.using is None or _admits(self.using, self.values, row.id)

    def check_written(self, row_id):
        """After a write, in its transaction: refuse it (and so roll it back) when the object it left
        does not pass the check policy."""
        if self.check is not None and not _admits(self.check, self.values, row_id):
            raise denied_by_policy()

    def check_proposed(self, name, owner):
        """Before a write that happens later without credentials (a signed upload): refuse it now when
        the object it would make does not pass the check policy."""
        if self.check is None:
            return
        row = sa.select(
            sa.literal(None, sa.String).label("id"),
            sa.literal(self.bucket.id).label("bucket_id"),
            sa.literal(name).label("name"),
            sa.literal(owner, sa.String).label("owner"),
            sa.literal(owner, sa.String).label("owner_id"),
            sa.null().label("metadata"),
        ).subquery("objects")
        statement = sa.select(sa.literal(1)).select_from(row).where(self.check.clause(row, self.values))
        if db.session.execute(statement).first() is None:
            raise denied_by_policy()


def policy_view():
    """What a bucket's row policies see of an object: its id, bucket_id, name, owner (and owner_id, as
    Supabase names it), metadata (the user metadata sent with the upload), mimetype, size and times."""
    objects = StorageObject.__table__.c
    return sa.select(
        objects.id,
        objects.bucket_id,
        objects.name,
        objects.owner,
        objects.owner.label("owner_id"),
        objects.user_metadata.label("metadata"),
        objects.mimetype,
        objects.size,
        objects.created_at,
        objects.updated_at,
    ).subquery("objects")


def _admits(policy, values, object_id):
    view = policy_view()
    statement = sa.select(view.c.id).where(view.c.id == object_id, policy.clause(view, values))
    return db.session.execute(statement).first() is not None


def denied_by_policy():
    """An object written that its bucket's row policy does not admit: 403, whoever the caller."""
    return storage_error(
        403, Storage.ACCESS_DENIED, "new row violates row-level security policy", "Unauthorized"
    )


def declared():
    """The buckets tables.toml declares, {name: tables_toml.buckets.Declared}."""
    return state().tables_toml.buckets


@transactions.transactional
def sync_declared():
    """Make or update the buckets tables.toml declares (idempotent; safe when instances start at once)."""
    now = clock.now()
    table = StorageBucket.__table__
    for bucket in declared().values():
        values = {
            "id": bucket.id,
            "public": bucket.public,
            "file_size_limit": bucket.file_size_limit,
            "allowed_mime_types": list(bucket.allowed_mime_types) if bucket.allowed_mime_types else None,
            "declared": True,
            "created_at": now,
            "updated_at": now,
        }
        update = {k: v for k, v in values.items() if k not in ("id", "created_at")}
        upsert(table, values, ["id"], update)


def check_policies():
    """Each [buckets.NAME.policies] entry, compiled and run by the database over the objects (a
    ConfigError naming the bucket and the operation when one does not compile)."""
    for bucket in declared().values():
        for operation, policy in bucket.policies.items():
            view = policy_view()
            statement = sa.select(view.c.id).where(policy.clause(view, {}))
            check_compiles(statement, f"tables.toml: [buckets.{bucket.id}.policies]", operation)


def has_policies():
    return any(bucket.policies for bucket in declared().values())


def ensure_synced():
    """sync_declared once per app, on the first storage request (start-up does it when it migrates)."""
    cache = state()
    if cache.buckets_synced:
        return
    with _synced_lock:
        if not cache.buckets_synced:
            sync_declared()
            cache.buckets_synced = True


# --- who may do what


def authorize(bucket, operation, who):
    """The Access for `who` to do `operation` in `bucket`, with the row policy that applies (the
    service_role key passes them all); None when its rule refuses them."""
    if who.role == "service_role":
        return Access(bucket)
    rule = bucket.rules.get(operation, "service_role")
    if rule == "anon" or (who.role == "authenticated" and rule == "authenticated"):
        owner = None
    elif who.role == "authenticated" and rule == "owner":
        owner = str(who.user_id)
    else:
        return None
    return Access(bucket, owner, *applying(bucket.policies, operation, who))


def require(bucket, operation, who):
    """The Access, or the error of a refused write: 401 to an anonymous caller, 403 to a signed-in one."""
    access = authorize(bucket, operation, who)
    if access is None:
        raise denied(who)
    return access


def denied(who, message=None):
    status = 401 if who.role == "anon" else 403
    return storage_error(
        status, Storage.ACCESS_DENIED, message or "new row violates row-level security policy", "Unauthorized"
    )


# --- reading buckets


def _bucket(row):
    rules = declared().get(row.id)
    return Bucket(
        row.id,
        row.public,
        row.file_size_limit,
        tuple(row.allowed_mime_types) if row.allowed_mime_types is not None else None,
        dict(rules.rules) if rules else {},
        dict(rules.policies) if rules else {},
    )


def find(bucket_id):
    """The bucket `bucket_id` (inside the caller's transaction); a 404 when there is none."""
    row = db.session.get(StorageBucket, bucket_id) if BUCKET_ID.fullmatch(bucket_id or "") else None
    if row is None:
        raise bucket_not_found()
    return _bucket(row)


def read(bucket_id):
    """find() on its own, outside any transaction: one prepared read of the bucket's row, without the
    session's work (an upload's checks before its body is taken, which no transaction holds)."""
    if not BUCKET_ID.fullmatch(bucket_id or ""):
        raise bucket_not_found()
    cache = state()
    if cache.bucket_read is None:
        table = StorageBucket.__table__
        query = sa.select(table.c.id, table.c.public, table.c.file_size_limit, table.c.allowed_mime_types)
        query = query.where(table.c.id == sa.bindparam("id", required=True))
        cache.bucket_read = statements.prepare(query, cache.reads or db.engine)
    rows = statements.prepared({"id": bucket_id}, cache.bucket_read)[0]
    if not rows:
        raise bucket_not_found()
    return _bucket(rows[0])


def visible(bucket, who):
    """Whether `who` may see that `bucket` exists: the service key, anyone for a public one, and whoever
    its select rule lets read."""
    return bucket.public or authorize(bucket, "select", who) is not None


def show(row):
    """A bucket as Supabase Storage shows it."""
    return {
        "id": row.id,
        "name": row.id,
        "owner": "",
        "public": row.public,
        "type": "STANDARD",
        "file_size_limit": row.file_size_limit,
        "allowed_mime_types": row.allowed_mime_types,
        "created_at": clock.iso(row.created_at),
        "updated_at": clock.iso(row.updated_at),
    }


def list_buckets(who):
    def work():
        rows = db.session.scalars(sa.select(StorageBucket).order_by(StorageBucket.id)).all()
        return [show(row) for row in rows if visible(_bucket(row), who)]

    return transactions.read(work)


def get_bucket(bucket_id, who):
    def work():
        bucket = find(bucket_id)
        if not visible(bucket, who):
            raise bucket_not_found()
        return show(db.session.get(StorageBucket, bucket_id))

    return transactions.read(work)


# --- the bucket API (the service_role key)


def settings(body, partial=False):
    """public, file_size_limit and allowed_mime_types of a create or update body, checked."""
    values = {}
    if "public" in body or not partial:
        public = body.get("public", False)
        if not isinstance(public, bool):
            raise invalid_request("public must be true or false")
        values["public"] = public
    if "file_size_limit" in body or not partial:
        limit = body.get("file_size_limit")
        if limit is not None and parse_size(limit) is None:
            raise invalid_request("Invalid file size format, hint: use 20GB / 20MB / 30KB / 3B, at most 8EB")
        values["file_size_limit"] = parse_size(limit) or None if limit is not None else None
    if "allowed_mime_types" in body or not partial:
        types = body.get("allowed_mime_types")
        if types is not None and (
            not isinstance(types, list)
            or len(types) > 100
            or not all(isinstance(t, str) and MIME_PATTERN.fullmatch(t.lower()) for t in types)
        ):
            raise invalid_request("allowed_mime_types must be a list of mime types such as image/*")
        values["allowed_mime_types"] = [t.lower() for t in types] if types else None
    return values


def _require_service(who):
    if who.role != "service_role":
        raise denied(who, "Only the service key may manage buckets")


@transactions.transactional
def create_bucket(body, who):
    _require_service(who)
    bucket_id = body.get("id") or body.get("name")
    if not isinstance(bucket_id, str) or not BUCKET_ID.fullmatch(bucket_id):
        raise storage_error(400, Storage.INVALID_BUCKET_NAME, "Bucket name invalid", "Invalid Input")
    values = settings(body)
    if db.session.get(StorageBucket, bucket_id, with_for_update=True) is not None:
        raise storage_error(409, Storage.BUCKET_ALREADY_EXISTS, "The resource already exists", "Duplicate")
    now = clock.now()
    db.session.add(StorageBucket(id=bucket_id, declared=False, created_at=now, updated_at=now, **values))
    try:
        db.session.flush()
    except sa.exc.IntegrityError:
        raise storage_error(
            409, Storage.BUCKET_ALREADY_EXISTS, "The resource already exists", "Duplicate"
        ) from None
    return {"name": bucket_id}


@transactions.transactional
def update_bucket(bucket_id, body, who):
    _require_service(who)
    changes = settings(body, partial=True)  # the body first, as Supabase's schema checks it
    if not changes:
        raise invalid_request("Give at least one of public, file_size_limit and allowed_mime_types")
    find(bucket_id)
    row = db.session.get(StorageBucket, bucket_id, with_for_update=True)
    for key, value in changes.items():
        setattr(row, key, value)
    row.updated_at = clock.now()
    return {"message": "Successfully updated"}


def empty_bucket(bucket_id, who, backend):
    """Delete every object of the bucket; their bytes go once the rows are gone."""
    _require_service(who)

    def work():
        find(bucket_id)
        query = sa.select(StorageObject.storage_key).where(StorageObject.bucket_id == bucket_id)
        keys = db.session.scalars(query).all()
        db.session.execute(sa.delete(StorageObject).where(StorageObject.bucket_id == bucket_id))
        return keys

    for key in transactions.write(work):
        backend.delete(key)
    return {"message": "Successfully emptied"}


@transactions.transactional
def delete_bucket(bucket_id, who):
    _require_service(who)
    find(bucket_id)
    if db.session.scalar(sa.select(StorageObject.id).where(StorageObject.bucket_id == bucket_id).limit(1)):
        raise storage_error(409, Storage.NOT_EMPTY, "The bucket you tried to delete is not empty")
    db.session.execute(sa.delete(StorageBucket).where(StorageBucket.id == bucket_id))
    return {"message": "Successfully deleted"}
