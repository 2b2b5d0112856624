"""Failed password sign-ins counted in the database, so that their limit holds across the processes
of one host (CGI, Passenger) and across instances, without a shared rate-limit store.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "minibase_failed_sign_ins",
        sa.Column("key", sa.String(64), primary_key=True),  # sha256 of (client IP, account)
        sa.Column("window_start", sa.DateTime, nullable=False, index=True),
        sa.Column("failures", sa.Integer, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade():
    op.drop_table("minibase_failed_sign_ins")
