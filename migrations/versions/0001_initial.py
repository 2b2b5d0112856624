"""The service's own tables, and the users table when the database has none yet.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from flask import current_app

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    users = current_app.config["USERS_TABLE"]
    if not sa.inspect(op.get_bind()).has_table(users):
        op.create_table(
            users,
            sa.Column("user_id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column(
                "email",
                sa.String(255).with_variant(sa.String(255, collation="NOCASE"), "sqlite"),
                nullable=False,
                unique=True,
            ),
            sa.Column("password", sa.String(255), nullable=False),
            sa.Column("username", sa.String(255)),
            sa.Column("first_name", sa.String(255)),
            sa.Column("last_name", sa.String(255)),
            sa.Column("active", sa.SmallInteger, nullable=False, server_default="1"),
            sa.Column("joined", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()),
            mysql_charset="utf8mb4",
        )
    op.create_table(
        "minibase_sessions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False, index=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("refreshed_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "minibase_refresh_tokens",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("token", sa.String(64), nullable=False, unique=True),
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey("minibase_sessions.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("parent", sa.String(64)),
        sa.Column("revoked", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("issued_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "minibase_profiles",
        sa.Column("user_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("about", sa.Text),
        sa.Column("extra", sa.JSON),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("last_sign_in_at", sa.DateTime),
    )


def downgrade():
    # The users table is not dropped: it may hold another application's users.
    op.drop_table("minibase_profiles")
    op.drop_table("minibase_refresh_tokens")
    op.drop_table("minibase_sessions")
