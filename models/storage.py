"""Storage's tables: buckets, objects' metadata and resumable uploads in progress."""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from extensions import db

# Storage's times to the millisecond, as Supabase Storage gives them (and sorts and pages by them):
# SQLite keeps what it is given; MySQL's DATETIME keeps whole seconds unless told otherwise.
STORAGE_TIME = DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


class StorageBucket(db.Model):
    """A storage bucket: from tables.toml's [buckets.NAME] (`declared`, made or updated at start) or
    made through the bucket API. Who may do what in it is tables.toml's, not a column's."""

    __tablename__ = "minibase_storage_buckets"

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    public: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    file_size_limit: Mapped[int | None] = mapped_column(BigInteger)  # bytes; None: STORAGE_FILE_SIZE_LIMIT
    allowed_mime_types: Mapped[list | None] = mapped_column(JSON)  # None: any
    declared: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at = mapped_column(STORAGE_TIME, nullable=False)
    updated_at = mapped_column(STORAGE_TIME, nullable=False)


class StorageObject(db.Model):
    """An object's metadata. Its bytes live under `storage_key`, a name minibase made, never the
    client's `name`: a new upload of a name gets a new key, so the old bytes stay whole until the
    row that names the new ones has committed."""

    __tablename__ = "minibase_storage_objects"
    __table_args__ = (UniqueConstraint("bucket_id", "name", name="uq_minibase_storage_objects_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    bucket_id: Mapped[str] = mapped_column(
        String(63), ForeignKey("minibase_storage_buckets.id"), nullable=False
    )
    name: Mapped[str] = mapped_column(String(512), nullable=False)
    # the uploader's user id; None for a key's upload, or once that user is gone
    owner: Mapped[str | None] = mapped_column(String(64), index=True)
    storage_key: Mapped[str] = mapped_column(String(64), nullable=False)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    mimetype: Mapped[str] = mapped_column(String(255), nullable=False)
    cache_control: Mapped[str] = mapped_column(String(255), nullable=False)
    etag: Mapped[str] = mapped_column(String(64), nullable=False)  # md5 of the bytes, hex
    user_metadata: Mapped[dict | None] = mapped_column(JSON)
    created_at = mapped_column(STORAGE_TIME, nullable=False)
    updated_at = mapped_column(STORAGE_TIME, nullable=False)


class StorageUpload(db.Model):
    """A resumable upload in progress: who began it (`role` and `owner`, as an object's owner), the
    object it will make, its declared `length`, the bytes `received` so far in `parts` (keys in the
    backend's uploads/ area, in order). Gone when the object is made, the upload is terminated, or
    it has expired."""

    __tablename__ = "minibase_storage_uploads"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    bucket_id: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(512), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)
    upsert: Mapped[bool] = mapped_column(Boolean, nullable=False)
    length: Mapped[int] = mapped_column(BigInteger, nullable=False)
    received: Mapped[int] = mapped_column(BigInteger, nullable=False)
    parts: Mapped[list] = mapped_column(JSON, nullable=False)
    mimetype: Mapped[str] = mapped_column(String(255), nullable=False)
    cache_control: Mapped[str] = mapped_column(String(255), nullable=False)
    user_metadata: Mapped[dict | None] = mapped_column(JSON)
    upload_metadata: Mapped[str | None] = mapped_column(Text)  # the Upload-Metadata header, as sent
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False, index=True)
