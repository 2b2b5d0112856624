"""Third-party sign-in and PKCE: identities linked to users, flows under way (an OAuth state, a
PKCE challenge and its auth code), and how each session was signed in.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_flow_states",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=True, index=True),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("code_challenge", sa.String(128), nullable=True),
        sa.Column("code_challenge_method", sa.String(8), nullable=True),
        sa.Column("auth_code_hash", sa.String(64), nullable=True, unique=True),
        sa.Column("redirect_to", sa.Text, nullable=True),
        sa.Column("link_user_id", sa.Integer, nullable=True),
        sa.Column("nonce", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False, index=True),
        sa.Column("auth_code_issued_at", sa.DateTime, nullable=True),
        **MYSQL,
    )
    op.create_table(
        "minibase_identities",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("provider_id", sa.String(255), nullable=False),
        sa.Column("user_id", sa.Integer, nullable=False, index=True),
        sa.Column("email", sa.String(255), nullable=True),
        sa.Column("identity_data", sa.JSON, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("last_sign_in_at", sa.DateTime, nullable=True),
        sa.UniqueConstraint("provider", "provider_id"),
        **MYSQL,
    )
    with op.batch_alter_table("minibase_sessions") as batch:
        batch.add_column(sa.Column("method", sa.String(32), nullable=True))


def downgrade():
    with op.batch_alter_table("minibase_sessions") as batch:
        batch.drop_column("method")
    op.drop_table("minibase_identities")
    op.drop_table("minibase_flow_states")
