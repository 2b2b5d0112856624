"""Multi-factor authentication: TOTP factors (their secrets sealed), their challenges, and each
session's assurance level and authentication methods.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_mfa_factors",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False, index=True),
        sa.Column("friendly_name", sa.String(255), nullable=False, server_default=""),
        sa.Column("factor_type", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("secret", sa.String(255), nullable=False),  # sealed: AES-GCM, never the secret
        sa.Column("last_step", sa.BigInteger, nullable=True),  # the last accepted code's time step
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("last_challenged_at", sa.DateTime, nullable=True),
        **MYSQL,
    )
    op.create_table(
        "minibase_mfa_challenges",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "factor_id",
            sa.String(36),
            sa.ForeignKey("minibase_mfa_factors.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("ip_address", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("verified_at", sa.DateTime, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        **MYSQL,
    )
    with op.batch_alter_table("minibase_sessions") as batch:
        # NULL: aal1, by a password at created_at (every session from before this revision).
        batch.add_column(sa.Column("aal", sa.String(8), nullable=True))
        batch.add_column(sa.Column("amr", sa.JSON, nullable=True))
        batch.add_column(sa.Column("factor_id", sa.String(36), nullable=True))


def downgrade():
    with op.batch_alter_table("minibase_sessions") as batch:
        for column in ("factor_id", "amr", "aal"):
            batch.drop_column(column)
    op.drop_table("minibase_mfa_challenges")
    op.drop_table("minibase_mfa_factors")
