"""Storage's times to the millisecond, as Supabase Storage gives them: objects uploaded within one
second keep their order when listed by time. SQLite keeps what it is given already; MySQL's
DATETIME kept whole seconds.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

COLUMNS = [(table, column) for table in ("minibase_storage_buckets", "minibase_storage_objects")
           for column in ("created_at", "updated_at")]  # fmt: skip


def upgrade():
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for table, column in COLUMNS:
        op.alter_column(
            table, column, type_=mysql.DATETIME(fsp=3), existing_type=sa.DateTime(), existing_nullable=False
        )


def downgrade():
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for table, column in COLUMNS:
        op.alter_column(
            table, column, type_=sa.DateTime(), existing_type=mysql.DATETIME(fsp=3), existing_nullable=False
        )
