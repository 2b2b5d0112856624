"""Storage: buckets and the metadata of their objects, in the service's own tables (the bytes are on
disk under STORAGE_ROOT or in S3, under names minibase makes).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# utf8mb4_bin: object names compare and sort byte by byte, as paths do (and as on SQLite).
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_storage_buckets",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("public", sa.Boolean, nullable=False),
        sa.Column("file_size_limit", sa.BigInteger, nullable=True),
        sa.Column("allowed_mime_types", sa.JSON, nullable=True),
        sa.Column("declared", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        **MYSQL,
    )
    op.create_table(
        "minibase_storage_objects",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("bucket_id", sa.String(63), sa.ForeignKey("minibase_storage_buckets.id"), nullable=False),
        # 512 characters: with the bucket id, within InnoDB's 3072-byte index key in utf8mb4.
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("storage_key", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("mimetype", sa.String(255), nullable=False),
        sa.Column("cache_control", sa.String(255), nullable=False),
        sa.Column("etag", sa.String(64), nullable=False),
        sa.Column("user_metadata", sa.JSON, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("bucket_id", "name", name="uq_minibase_storage_objects_name"),
        **MYSQL,
    )


def downgrade():
    op.drop_table("minibase_storage_objects")
    op.drop_table("minibase_storage_buckets")
