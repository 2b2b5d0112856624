"""On MySQL/MariaDB, the service's own tables in utf8mb4 whatever the database's default charset
(a latin1 default refused any non-Latin text), with a binary collation: tokens and ids compare
exactly, never case- or accent-blind. Nothing to do on SQLite, which stores UTF-8.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("minibase_sessions", "minibase_refresh_tokens", "minibase_profiles", "minibase_signup_locks")


def upgrade():
    bind = op.get_bind()
    if bind.dialect.name != "mysql":
        return
    # MySQL refuses to change a column a foreign key uses: drop the key, convert, put it back.
    keys = sa.inspect(bind).get_foreign_keys("minibase_refresh_tokens")
    for key in keys:
        op.drop_constraint(key["name"], "minibase_refresh_tokens", type_="foreignkey")
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    for key in keys:
        op.create_foreign_key(
            key["name"],
            "minibase_refresh_tokens",
            key["referred_table"],
            key["constrained_columns"],
            key["referred_columns"],
            ondelete=key["options"].get("ondelete"),
        )


def downgrade():
    pass  # utf8mb4 holds everything the old charset did
