"""Realtime: the log of changes to the tables that opt in (`realtime = true`), written by triggers on
those tables in the writer's own transaction and read by every instance's change feed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "minibase_realtime_changes",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("table_name", sa.String(64), nullable=False),
        sa.Column("operation", sa.String(6), nullable=False),
        sa.Column("new_row", sa.Text().with_variant(mysql.LONGTEXT(), "mysql"), nullable=True),
        sa.Column("old_row", sa.Text().with_variant(mysql.LONGTEXT(), "mysql"), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sqlite_autoincrement=True,  # ids never reused once the log is trimmed empty
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade():
    op.drop_table("minibase_realtime_changes")
