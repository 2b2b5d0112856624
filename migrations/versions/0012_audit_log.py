"""The audit log (every auth event and dashboard action, with actor, IP and time) and the dashboard's
sign-in cookies, each tied to an auth session so that ending the session ends the cookie.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade():
    op.create_table(
        "minibase_audit_log",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("actor_id", sa.Integer, nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=True),
        sa.Column("ip", sa.String(64), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("details", sa.JSON, nullable=True),
        **MYSQL,
    )
    op.create_index("ix_minibase_audit_log_created_at", "minibase_audit_log", ["created_at"])
    op.create_table(
        "minibase_dashboard_sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("session_id", sa.String(36), nullable=False, index=True),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("verified", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        **MYSQL,
    )


def downgrade():
    op.drop_table("minibase_dashboard_sessions")
    op.drop_index("ix_minibase_audit_log_created_at", "minibase_audit_log")
    op.drop_table("minibase_audit_log")
