"""When an invitation was sent: GoTrue's invited_at on the user.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("minibase_profiles") as batch:
        batch.add_column(sa.Column("invited_at", sa.DateTime, nullable=True))


def downgrade():
    with op.batch_alter_table("minibase_profiles") as batch:
        batch.drop_column("invited_at")
