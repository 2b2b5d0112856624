"""The webhooks' deliveries, from the outbox the triggers write (live/capture.py) to the receiver.

Why an outbox written by the trigger, and not the Realtime change log: the change log is read from
its end by each instance and trimmed after minutes, so what changed while no instance was up, or
while the receiver was down for a day, would be gone; an event row here is written in the writer's
transaction, so it exists exactly when the change committed, and stays until every hook took it in.

Each hook takes the events of its table into deliveries of its own: (hook, event_id) is unique, so
any number of instances may take the same event in and one delivery results. A delivery is sent by
the instance that holds its lease: a conditional UPDATE that only one of them can win (on Galera
the other's commit fails certification), held for the hook's timeout and a margin; an instance
killed mid-POST leaves the lease to run out, and the delivery is sent again (at least once). A hook
sends its deliveries one at a time in event order, the first still pending first: a delivery that
fails holds back the later ones of its hook (commit order per table) until it is delivered or its
max_age has passed (then it is `failed`, and can be sent again by hand), and holds back no other
hook. An event id is taken when the writer's statement runs, so two transactions open at once on
different rows go out in the order they wrote; a row's own changes always go out in order."""

import json
import logging
import socket
import time
import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from extensions import db
from models.changes import Callout, WebhookAttempt, WebhookDelivery, WebhookEvent
from values import is_tinyint_boolean
from webhooks import sending

log = logging.getLogger("minibase")


def instance_name():
    """Who holds a lease, in the records: the host, and a random part for each Background."""
    return f"{socket.gethostname()[:40]}:{uuid.uuid4().hex[:8]}"


INSTANCE = instance_name()  # the leases of what a command (not a Background) runs
LATE_SECONDS = 120  # an event whose transaction stayed open this long is still taken in
TAKE_BATCH = 500
SEND_BATCH = 100  # deliveries claimed at once, sent one after another while the lease lasts
LEASE_MARGIN = 30.0  # seconds a lease outlives the hook's timeout: the recording after the POST
EVENTS = WebhookEvent.__table__
DELIVERIES = WebhookDelivery.__table__
ATTEMPTS = WebhookAttempt.__table__
CALLOUTS = Callout.__table__


def insert_ignoring_duplicates(table, rows):
    """INSERT that leaves a row whose unique key is taken as it is: one statement on both databases."""
    if db.engine.dialect.name == "mysql":
        return mysql.insert(table).values(rows).prefix_with("IGNORE")
    return sqlite.insert(table).values(rows).on_conflict_do_nothing()


def first_seen(kind, name, now):
    """When the webhook or schedule `name` was first seen by any instance (now, if by none yet)."""
    with db.engine.begin() as connection:
        connection.execute(insert_ignoring_duplicates(CALLOUTS, [{"kind": kind, "name": name, "since": now}]))
        return connection.execute(
            sa.select(CALLOUTS.c.since).where(CALLOUTS.c.kind == kind, CALLOUTS.c.name == name)
        ).scalar_one()


class Queue:
    """One hook's deliveries, as this process sees them: the highest event id taken in, and its
    table's columns (for the payload's types)."""

    def __init__(self, hook, instance=INSTANCE, lasts=None):
        self.hook = hook
        self.instance = instance
        self.lasts = hook.target.timeout if lasts is None else lasts  # the longest one attempt takes
        self.high = 0
        self.since = None
        self.columns = None

    def take_in(self, now):
        """Make the deliveries of the events committed since the last look (and of those an open
        transaction committed late); how many were new."""
        if self.since is None:
            self.since = first_seen("webhook", self.hook.name, now)
        if self.columns is None:
            self.columns = _columns(self.hook.table)
        taken = sa.select(DELIVERIES.c.id).where(
            DELIVERIES.c.hook == self.hook.name, DELIVERIES.c.event_id == EVENTS.c.id
        )
        query = (
            sa.select(EVENTS)
            .where(
                EVENTS.c.table_name == self.hook.table,
                EVENTS.c.operation.in_(self.hook.events),
                EVENTS.c.created_at >= self.since,
                sa.or_(EVENTS.c.id > self.high, EVENTS.c.created_at > now - LATE_SECONDS),
                ~sa.exists(taken),
            )
            .order_by(EVENTS.c.id)
            .limit(TAKE_BATCH)
        )
        with db.engine.begin() as connection:
            events = connection.execute(query).all()
            if not events:
                return 0
            rows = [
                {
                    "hook": self.hook.name,
                    "event_id": event.id,
                    "status": "pending",
                    "attempts": 0,
                    "payload": json.dumps(self.payload(event), separators=(",", ":"), default=str),
                    "created_at": event.created_at,
                    "next_at": event.created_at,
                }
                for event in events
            ]
            connection.execute(insert_ignoring_duplicates(DELIVERIES, rows))
        self.high = max(self.high, events[-1].id)
        return len(events)

    def payload(self, event):
        """Supabase's database webhook payload."""
        return {
            "type": event.operation,
            "table": event.table_name,
            "schema": "public",
            "record": self._row(event.new_row),
            "old_record": self._row(event.old_row),
        }

    def _row(self, text):
        if not text:
            return None
        row = json.loads(text)
        return {name: _typed(self.columns.get(name), value) for name, value in row.items()}

    def due(self, now):
        """(the deliveries to send now, the seconds to wait when there are none): the first pending
        ones of this hook, in event order, as long as each is due and no other instance holds it."""
        with db.engine.connect() as connection:
            pending = connection.execute(
                sa.select(DELIVERIES)
                .where(DELIVERIES.c.hook == self.hook.name, DELIVERIES.c.status == "pending")
                .order_by(DELIVERIES.c.event_id)
                .limit(SEND_BATCH)
            ).all()
        ready = []
        for delivery in pending:
            if delivery.next_at > now or (delivery.lease_until is not None and delivery.lease_until >= now):
                break
            ready.append(delivery)
        if ready or not pending:
            return ready, None
        head = pending[0]
        return [], max(0.0, head.next_at - now) if head.next_at > now else None  # None: another sends it

    def claim(self, deliveries, now):
        """Take the lease of `deliveries` (the due ones, in order), all or none: the conditional
        UPDATE matches only those still pending with no other instance's unexpired lease, so of two
        instances claiming at once one gets them (on Galera the other's commit fails certification).
        The lease outlives one POST by LEASE_MARGIN: the deadline by which the batch stops."""
        lease = now + self.lasts + LEASE_MARGIN
        ids = [delivery.id for delivery in deliveries]
        try:
            with db.engine.begin() as connection:
                claimed = connection.execute(
                    sa.update(DELIVERIES)
                    .where(
                        DELIVERIES.c.id.in_(ids),
                        DELIVERIES.c.status == "pending",
                        sa.or_(DELIVERIES.c.lease_until.is_(None), DELIVERIES.c.lease_until < now),
                    )
                    .values(lease_until=lease, leased_by=self.instance)
                ).rowcount
                if claimed != len(ids):  # another instance took some meanwhile: leave them all to it
                    connection.execute(self._release(ids))
                    claimed = 0
        except DBAPIError as exc:  # Galera: another node's claim won certification
            log.info("webhooks: %s lost a claim to another instance: %s", self.hook.name, _first(exc))
            return None
        return lease if claimed else None

    def _release(self, ids):
        return (
            sa.update(DELIVERIES)
            .where(DELIVERIES.c.id.in_(ids), DELIVERIES.c.leased_by == self.instance)
            .values(lease_until=None, leased_by=None)
        )

    def record(self, sent, unsent, retry):
        """Keep each attempt of `sent` [(delivery, outcome, started)], and move each delivery on:
        delivered; else retried after retry(attempts) seconds, or failed once that would be past the
        hook's max_age. `unsent` are released for the next claim. Only while this instance still
        holds the leases (one that ran out is another's now). The statuses, in order."""
        now = time.time()
        statuses = []
        with db.engine.begin() as connection:
            for delivery, outcome, started in sent:
                attempts = delivery.attempts + 1
                values = {"attempts": attempts, "lease_until": None, "leased_by": None}
                values |= {"last_status": outcome.status, "last_error": outcome.error}
                if outcome.ok:
                    values |= {"status": "delivered", "delivered_at": now}
                else:
                    next_at = now + retry(attempts)
                    past = next_at > delivery.created_at + self.hook.max_age
                    values |= {"status": "failed" if past else "pending", "next_at": next_at}
                statuses.append(values["status"])
                connection.execute(
                    sa.insert(ATTEMPTS).values(_attempt(delivery.id, outcome, started, self.instance))
                )
                connection.execute(
                    sa.update(DELIVERIES)
                    .where(DELIVERIES.c.id == delivery.id, DELIVERIES.c.leased_by == self.instance)
                    .values(**values)
                )
            if unsent:
                connection.execute(self._release([delivery.id for delivery in unsent]))
        return statuses


def _attempt(delivery_id, outcome, started, instance):
    return {
        "delivery_id": delivery_id,
        "started_at": started,
        "duration_ms": outcome.duration_ms,
        "status": outcome.status,
        "error": outcome.error,
        "instance": instance,
    }


def _columns(table):
    """{column: its SQLAlchemy type} of the hook's table ({} when the database has no such table)."""
    try:
        reflected = sa.Table(table, sa.MetaData(), autoload_with=db.engine)
    except NoSuchTableError:
        return {}
    return {column.name: column.type for column in reflected.c}


def _typed(kind, value):
    """A trigger's JSON value as the API shows it: booleans (0/1 in the databases) and JSON columns."""
    if (isinstance(kind, sa.Boolean) or is_tinyint_boolean(kind)) and isinstance(value, int):
        return bool(value)
    if isinstance(kind, sa.JSON) and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def send(hook, delivery, secret):
    """One attempt of `delivery` to the hook's URL (sending.post)."""
    target = hook.target
    message_id = f"{hook.name}_{delivery.event_id}"
    return sending.post(
        target.url, delivery.payload.encode(), target.headers, secret, message_id, target.timeout
    )


def resend(delivery_id, now):
    """Put a failed delivery back in its hook's queue, to be sent once more at once: true when it
    was failed (one of two admins asking at once wins)."""
    with db.engine.begin() as connection:
        return (
            connection.execute(
                sa.update(DELIVERIES)
                .where(DELIVERIES.c.id == delivery_id, DELIVERIES.c.status == "failed")
                .values(status="pending", next_at=now, lease_until=None, leased_by=None)
            ).rowcount
            == 1
        )


def backlog():
    """Deliveries of every hook waiting to be made (metrics.WEBHOOK_BACKLOG, read when asked)."""
    with db.engine.connect() as connection:
        query = sa.select(sa.func.count()).select_from(DELIVERIES).where(DELIVERIES.c.status == "pending")
        return connection.execute(query).scalar()


def exists(delivery_id):
    with db.engine.connect() as connection:
        found = connection.execute(sa.select(DELIVERIES.c.id).where(DELIVERIES.c.id == delivery_id)).first()
    return found is not None


def listing(hook=None, status=None, limit=50, before=None):
    """The newest deliveries (of `hook`, in `status`), each with its attempts, newest first."""
    query = sa.select(DELIVERIES).order_by(DELIVERIES.c.id.desc()).limit(limit)
    if hook is not None:
        query = query.where(DELIVERIES.c.hook == hook)
    if status is not None:
        query = query.where(DELIVERIES.c.status == status)
    if before is not None:
        query = query.where(DELIVERIES.c.id < before)
    with db.engine.connect() as connection:
        rows = connection.execute(query).all()
        ids = [row.id for row in rows]
        tried = (
            connection.execute(
                sa.select(ATTEMPTS).where(ATTEMPTS.c.delivery_id.in_(ids)).order_by(ATTEMPTS.c.id)
            ).all()
            if ids
            else []
        )
    attempts = {}
    for attempt in tried:
        attempts.setdefault(attempt.delivery_id, []).append(
            {
                "started_at": _iso(attempt.started_at),
                "duration_ms": attempt.duration_ms,
                "status": attempt.status,
                "error": attempt.error,
            }
        )
    return [
        {
            "id": row.id,
            "hook": row.hook,
            "event_id": row.event_id,
            "status": row.status,
            "attempts": attempts.get(row.id, []),
            "created_at": _iso(row.created_at),
            "next_at": _iso(row.next_at) if row.status == "pending" else None,
            "delivered_at": _iso(row.delivered_at),
            "last_status": row.last_status,
            "last_error": row.last_error,
            "payload": json.loads(row.payload),
        }
        for row in rows
    ]


def trim(keep_seconds, now):
    """Delete the events taken in longer ago than `keep_seconds`, and the finished deliveries (and
    their attempts) as old. Two instances trimming at once (a conflict on Galera) is logged."""
    cutoff = now - keep_seconds
    try:
        with db.engine.begin() as connection:
            connection.execute(sa.delete(EVENTS).where(EVENTS.c.created_at < cutoff))
            old = (
                connection.execute(
                    sa.select(DELIVERIES.c.id).where(
                        DELIVERIES.c.created_at < cutoff, DELIVERIES.c.status != "pending"
                    )
                )
                .scalars()
                .all()
            )
            for start in range(0, len(old), TAKE_BATCH):
                some = old[start : start + TAKE_BATCH]
                connection.execute(sa.delete(ATTEMPTS).where(ATTEMPTS.c.delivery_id.in_(some)))
                connection.execute(sa.delete(DELIVERIES).where(DELIVERIES.c.id.in_(some)))
    except DBAPIError as exc:
        log.warning("webhooks: trimming the history failed, trying again later: %s", _first(exc))


def _iso(moment):
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _first(exc):
    return str(getattr(exc, "orig", exc)).splitlines()[0][:300]
