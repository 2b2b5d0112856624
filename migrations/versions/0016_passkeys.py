"""Passkeys: WebAuthn credentials of users (their public keys and sign counters, never a secret)
and the ceremonies' challenges, each single use and short-lived.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_webauthn_credentials",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False, index=True),
        # A credential id is up to 1023 bytes: too long for a unique index, so its hash has one.
        sa.Column("credential_key", sa.String(64), nullable=False, unique=True),
        sa.Column("credential_id", sa.Text, nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("sign_count", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("aaguid", sa.String(36), nullable=True),
        sa.Column("transports", sa.JSON, nullable=True),
        sa.Column("friendly_name", sa.String(120), nullable=False, server_default=""),
        sa.Column("factor_id", sa.String(36), nullable=True, index=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("last_used_at", sa.DateTime, nullable=True),
        **MYSQL,
    )
    op.create_table(
        "minibase_webauthn_challenges",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("user_id", sa.Integer, nullable=True, index=True),
        sa.Column("factor_id", sa.String(36), nullable=True),
        sa.Column("challenge", sa.String(128), nullable=False),
        sa.Column("ip_address", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False, index=True),
        **MYSQL,
    )


def downgrade():
    op.drop_table("minibase_webauthn_challenges")
    op.drop_table("minibase_webauthn_credentials")
