"""Resumable uploads in progress (TUS at /storage/v1/upload/resumable): who began each, the object
it will make, its length and the parts received so far (their bytes in the backend's uploads/ area).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_storage_uploads",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("bucket_id", sa.String(63), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("upsert", sa.Boolean, nullable=False),
        sa.Column("length", sa.BigInteger, nullable=False),
        sa.Column("received", sa.BigInteger, nullable=False),
        sa.Column("parts", sa.JSON, nullable=False),
        sa.Column("mimetype", sa.String(255), nullable=False),
        sa.Column("cache_control", sa.String(255), nullable=False),
        sa.Column("user_metadata", sa.JSON, nullable=True),
        sa.Column("upload_metadata", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        **MYSQL,
    )
    op.create_index("ix_minibase_storage_uploads_expires_at", "minibase_storage_uploads", ["expires_at"])


def downgrade():
    op.drop_index("ix_minibase_storage_uploads_expires_at", "minibase_storage_uploads")
    op.drop_table("minibase_storage_uploads")
