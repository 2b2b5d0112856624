"""Database webhooks and schedules: the events the webhook tables' triggers write in the writer's
transaction (the outbox), each hook's deliveries of them and every attempt, the runs of schedules
(one row per schedule and due time), and when each hook and schedule was first seen.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LONG = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")
TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade():
    op.create_table(
        "minibase_webhook_events",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("table_name", sa.String(64), nullable=False),
        sa.Column("operation", sa.String(6), nullable=False),
        sa.Column("new_row", LONG, nullable=True),
        sa.Column("old_row", LONG, nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sqlite_autoincrement=True,
        **TABLE,
    )
    op.create_index("minibase_webhook_events_table", "minibase_webhook_events", ["table_name", "id"])
    op.create_index("minibase_webhook_events_created", "minibase_webhook_events", ["created_at"])
    op.create_table(
        "minibase_webhook_deliveries",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("hook", sa.String(64), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),  # pending, delivered, failed
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("payload", LONG, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),  # the change's
        sa.Column("next_at", sa.Double(), nullable=False),
        sa.Column("lease_until", sa.Double(), nullable=True),
        sa.Column("leased_by", sa.String(64), nullable=True),
        sa.Column("delivered_at", sa.Double(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.UniqueConstraint("hook", "event_id", name="minibase_webhook_deliveries_once"),
        sqlite_autoincrement=True,
        **TABLE,
    )
    op.create_index(
        "minibase_webhook_deliveries_queue", "minibase_webhook_deliveries", ["hook", "status", "event_id"]
    )
    op.create_table(
        "minibase_webhook_attempts",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("delivery_id", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),  # the HTTP status; none: no answer
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("instance", sa.String(64), nullable=True),
        **TABLE,
    )
    op.create_index("minibase_webhook_attempts_delivery", "minibase_webhook_attempts", ["delivery_id"])
    op.create_table(
        "minibase_schedule_runs",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("schedule", sa.String(64), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=False),  # seconds since the epoch, UTC
        sa.Column("status", sa.String(10), nullable=False),  # running, succeeded, failed, skipped
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("error", sa.String(1000), nullable=True),
        sa.Column("instance", sa.String(64), nullable=True),
        sa.UniqueConstraint("schedule", "due_at", name="minibase_schedule_runs_once"),
        **TABLE,
    )
    op.create_table(
        "minibase_callouts",
        sa.Column("kind", sa.String(10), primary_key=True),  # webhook, schedule
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("since", sa.Double(), nullable=False),
        **TABLE,
    )


def downgrade():
    for table in (
        "minibase_callouts",
        "minibase_schedule_runs",
        "minibase_webhook_attempts",
        "minibase_webhook_deliveries",
        "minibase_webhook_events",
    ):
        op.drop_table(table)
