"""The changes the tables' own triggers record (live/capture.py), and what is done with them: Realtime's
change log, webhooks' events, deliveries and attempts, schedules' runs, and when each hook and
schedule was first seen."""

from sqlalchemy import (
    BigInteger,
    Double,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from extensions import db


class RealtimeChange(db.Model):
    """A row inserted, updated or deleted in a table that opts in to Realtime, as the table's own
    triggers (live/capture.py) write it in the writer's transaction: the rows as JSON objects, and
    when (seconds since the epoch). Every instance's change feed reads it; it is trimmed soon."""

    __tablename__ = "minibase_realtime_changes"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    table_name: Mapped[str] = mapped_column(String(64), nullable=False)
    operation: Mapped[str] = mapped_column(String(6), nullable=False)  # INSERT, UPDATE, DELETE
    new_row = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"))
    old_row = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"))
    created_at: Mapped[float] = mapped_column(Double, nullable=False)


LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql")
ID = BigInteger().with_variant(Integer(), "sqlite")


class WebhookEvent(db.Model):
    """A change of a table some webhook listens to, written by the table's triggers (live/capture.py)
    in the writer's transaction: the outbox the deliveries are taken from (webhooks/outbox.py)."""

    __tablename__ = "minibase_webhook_events"
    __table_args__ = (
        Index("minibase_webhook_events_table", "table_name", "id"),
        Index("minibase_webhook_events_created", "created_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(64), nullable=False)
    operation: Mapped[str] = mapped_column(String(6), nullable=False)
    new_row = mapped_column(LONG_TEXT)
    old_row = mapped_column(LONG_TEXT)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)


class WebhookDelivery(db.Model):
    """One hook's delivery of one event: its payload, where it stands, and the lease of the instance
    sending it now. (hook, event_id) is unique: every instance may take the same event in, once."""

    __tablename__ = "minibase_webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("hook", "event_id", name="minibase_webhook_deliveries_once"),
        Index("minibase_webhook_deliveries_queue", "hook", "status", "event_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    hook: Mapped[str] = mapped_column(String(64), nullable=False)
    event_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(10), nullable=False)  # pending, delivered, failed
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    payload = mapped_column(LONG_TEXT, nullable=False)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)  # the change's
    next_at: Mapped[float] = mapped_column(Double, nullable=False)
    lease_until = mapped_column(Double)
    leased_by = mapped_column(String(64))
    delivered_at = mapped_column(Double)
    last_status = mapped_column(Integer)
    last_error = mapped_column(String(500))


class WebhookAttempt(db.Model):
    """One POST of a delivery: when, how long, the answer's status (none: no answer) and the error."""

    __tablename__ = "minibase_webhook_attempts"
    __table_args__ = (Index("minibase_webhook_attempts_delivery", "delivery_id"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    duration_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    status = mapped_column(Integer)
    error = mapped_column(String(500))
    instance = mapped_column(String(64))


class ScheduleRun(db.Model):
    """A schedule's run for one due time: (schedule, due_at) is unique, so however many instances
    reach that time, one of them runs it (webhooks/schedules.py)."""

    __tablename__ = "minibase_schedule_runs"
    __table_args__ = (UniqueConstraint("schedule", "due_at", name="minibase_schedule_runs_once"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    schedule: Mapped[str] = mapped_column(String(64), nullable=False)
    due_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(10), nullable=False)  # running, succeeded, failed, skipped
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    ended_at = mapped_column(Double)
    error = mapped_column(String(1000))
    instance = mapped_column(String(64))


class Callout(db.Model):
    """When a webhook or a schedule was first seen: a hook takes the changes from then on, and a
    schedule catches up on a run missed while nothing was up only if it existed then."""

    __tablename__ = "minibase_callouts"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # webhook, schedule
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    since: Mapped[float] = mapped_column(Double, nullable=False)
