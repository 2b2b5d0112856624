"""A lock row per e-mail address signed up, for users tables with no unique index on email.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "minibase_signup_locks",
        sa.Column("email_key", sa.String(64), primary_key=True),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade():
    op.drop_table("minibase_signup_locks")
