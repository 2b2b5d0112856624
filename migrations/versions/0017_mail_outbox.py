"""The mail outbox: each e-mail (or send_email hook call) an auth flow sends, written in the
transaction that issues its token and sent after that transaction commits, by whoever holds the
row's lease (auth/outbox.py).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade():
    op.create_table(
        "minibase_mail_outbox",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("content", sa.Text().with_variant(mysql.LONGTEXT(), "mysql"), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.Column("claimed_by", sa.String(32), nullable=False),
        sa.Column("lease_until", sa.DateTime, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        **MYSQL,
    )
    op.create_index("ix_minibase_mail_outbox_lease_until", "minibase_mail_outbox", ["lease_until"])


def downgrade():
    op.drop_index("ix_minibase_mail_outbox_lease_until", "minibase_mail_outbox")
    op.drop_table("minibase_mail_outbox")
