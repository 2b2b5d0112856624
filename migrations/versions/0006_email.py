"""E-mail flows: one-time tokens (link tokens and 6-digit codes, stored only as keyed hashes), the
last e-mail sent to each address (its rate limit), and a user's confirmation state, all in the
service's own tables.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade():
    op.create_table(
        "minibase_one_time_tokens",
        sa.Column("user_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("purpose", sa.String(20), primary_key=True),  # signup, recovery, magiclink, …
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("email", sa.String(255), nullable=False),  # where it was sent
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.Column("wrong_guesses", sa.Integer, nullable=False, server_default="0"),
        **MYSQL,
    )
    op.create_table(
        "minibase_email_sends",
        sa.Column("address_key", sa.String(64), primary_key=True),  # keyed hash of the address
        sa.Column("sent_at", sa.DateTime, nullable=False, index=True),
        **MYSQL,
    )
    with op.batch_alter_table("minibase_profiles") as batch:
        # True only while a sign-up made with MAILER_AUTOCONFIRM off awaits its confirmation: users
        # from before confirmation was turned on count as confirmed.
        batch.add_column(sa.Column("unconfirmed", sa.Boolean, nullable=True))
        batch.add_column(sa.Column("confirmation_sent_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("confirmed_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("recovery_sent_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("new_email", sa.String(255), nullable=True))
        batch.add_column(sa.Column("email_change_sent_at", sa.DateTime, nullable=True))


def downgrade():
    with op.batch_alter_table("minibase_profiles") as batch:
        for column in (
            "email_change_sent_at",
            "new_email",
            "recovery_sent_at",
            "confirmed_at",
            "confirmation_sent_at",
            "unconfirmed",
        ):
            batch.drop_column(column)
    op.drop_table("minibase_email_sends")
    op.drop_table("minibase_one_time_tokens")
