"""Profiles get a ban's end (admin `ban_duration`) and the app_metadata an administrator sets.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("minibase_profiles") as batch:
        batch.add_column(sa.Column("banned_until", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("app_metadata", sa.JSON, nullable=True))


def downgrade():
    with op.batch_alter_table("minibase_profiles") as batch:
        batch.drop_column("app_metadata")
        batch.drop_column("banned_until")
