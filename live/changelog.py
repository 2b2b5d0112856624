"""Reading the change log the triggers write (live/capture.py): every change that commits, each once,
in the order the changes commit as far as one read can tell it; and trimming it.

A log id is taken when a transaction writes, not when it commits. On MySQL/MariaDB a transaction that
stays open commits an id lower than ones already read, a rolled-back write leaves an id that never
appears, and the nodes of a Galera cluster take every Nth id each, leaving the others unused. None of
these can be told apart when an id is found missing, so the reader waits for none: it hands out what
has committed, and looks for each missing id again for LATE_SECONDS, handing it out when its
transaction commits. (SQLite takes ids in commit order and reuses a rolled-back one: nothing is ever
missing there.)"""

import bisect
import json
import logging
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

import metrics
from extensions import db
from live import capture

log = logging.getLogger("minibase")

LATE_SECONDS = 120  # how long a missing id is looked for: the longest a writing transaction may stay open
LOOK_SECONDS = 0.2  # between two looks for the missing ids older than the newest SPANS ranges
# A change stays in the log this long after its write: well past LATE_SECONDS, so that the row of a
# transaction that commits late is still there when every instance reads it.
KEEP_SECONDS = 300
BATCH = 500  # changes read at once
SPANS = 32  # the newest missing ranges, read with every read of the log


@dataclass(frozen=True)
class Change:
    id: int
    table: str
    operation: str
    new: dict | None
    old: dict | None
    at: float


class Reader:
    """One feed's place in the log: the highest id read, and the ids below it not seen yet, as
    ranges [first, last, since] in id order (so in the order they were missed too), each looked for
    until LATE_SECONDS after it was first missed. Its methods run in the app's context, one at a
    time."""

    def __init__(self):
        self.high = 0
        self.missing = []
        self.looked = 0.0

    def start(self):
        """From the end of the log; the ids missing among the changes of the last LATE_SECONDS are
        looked for (a transaction open now may commit them)."""
        log_table, cutoff = _log_table(), _now() - LATE_SECONDS
        with db.engine.connect() as connection:
            older = connection.execute(
                sa.select(sa.func.max(log_table.c.id)).where(log_table.c.created_at < cutoff)
            ).scalar()
            recent = connection.execute(
                sa.select(log_table.c.id).where(log_table.c.id > (older or 0)).order_by(log_table.c.id)
            ).scalars()
            self.high, now = older or 0, time.monotonic()
            for found in recent:
                self._passed(found, now)

    def read(self):
        """The changes committed since the last read, each once, in id order: those past the highest
        id read, and those of missing ids that have committed since. The newest SPANS missing
        ranges are read with the new changes, in one query; older ones (a Galera cluster leaves a
        range after nearly every change) are looked for every LOOK_SECONDS."""
        now = time.monotonic()
        expired = next((n for n, gap in enumerate(self.missing) if now - gap[2] < LATE_SECONDS), None)
        del self.missing[: len(self.missing) if expired is None else expired]  # the oldest come first
        log_table = _log_table()
        recent = (log_table.c.id.between(first, last) for first, last, _ in self.missing[-SPANS:])
        where, late = sa.or_(log_table.c.id > self.high, *recent), []
        if len(self.missing) > SPANS and now - self.looked >= LOOK_SECONDS:
            self.looked = now
            late = self._late(self.missing[:-SPANS])
        changes = _changes(sa.select(log_table).where(where).order_by(log_table.c.id).limit(BATCH))
        for change in late + changes:  # only once both reads succeeded: a failed one loses nothing
            if change.id > self.high:
                self._passed(change.id, now)
            else:
                self._found(change.id)
        # The database's clock against this one's: the same machine's, or near enough, in a cluster.
        metrics.REALTIME_LAG.set(max(0.0, time.time() - changes[-1].at) if changes else 0.0)
        return late + changes

    def _passed(self, n, now):
        """Id n is the highest read: the ids skipped to reach it are missing from now on."""
        if n > self.high + 1:
            self.missing.append([self.high + 1, n - 1, now])
        self.high = n

    def _late(self, older):
        """The changes of the `older` missing ranges that have committed since, looked for in one
        span from the first of them to the last, whose every id is either read already or missing:
        while the span holds as many rows as were read of it, none has come (counted by the database:
        12,000 ranges cost 5 ms, where reading their ids cost 200); else its ids, then the changes
        whose ids were missing."""
        log_table = _log_table()
        first, last = older[0][0], older[-1][1]
        span = log_table.c.id.between(first, last)
        read = last - first + 1 - sum(gap[1] - gap[0] + 1 for gap in older)
        with db.engine.connect() as connection:
            if (
                connection.execute(sa.select(sa.func.count()).select_from(log_table).where(span)).scalar()
                == read
            ):
                return []
            found = connection.execute(sa.select(log_table.c.id).where(span)).scalars().all()
        wanted, at = [], 0
        for n in found:  # both in id order
            while at < len(older) and older[at][1] < n:
                at += 1
            if at < len(older) and older[at][0] <= n:
                wanted.append(n)
        if not wanted:
            return []
        return _changes(sa.select(log_table).where(log_table.c.id.in_(wanted)).order_by(log_table.c.id))

    def _found(self, n):
        """Id n, missing, has committed: its range is split around it."""
        at = self._gap(n)
        if at is not None:
            first, last, since = self.missing[at]
            parts = [[first, n - 1, since], [n + 1, last, since]]
            self.missing[at : at + 1] = [part for part in parts if part[0] <= part[1]]

    def _gap(self, n):
        """The index of the missing range that holds id n, or None."""
        at = bisect.bisect_right(self.missing, n, key=lambda gap: gap[0]) - 1
        return at if at >= 0 and self.missing[at][1] >= n else None


def trim():
    """Delete the changes written more than KEEP_SECONDS ago, all but the newest: MySQL before 8.0
    restarted takes its next id from the largest one left, so an empty log would hand out again ids
    the readers have passed. Only rows read as committed are named, so an open transaction's row is
    never waited for. Two instances trimming at once (a conflict on Galera) is logged, not raised."""
    log_table = _log_table()
    try:
        with db.engine.begin() as connection:
            newest = connection.execute(sa.select(sa.func.max(log_table.c.id))).scalar()
            if newest is None:
                return
            old = (
                connection.execute(
                    sa.select(log_table.c.id).where(
                        log_table.c.created_at < _now() - KEEP_SECONDS, log_table.c.id < newest
                    )
                )
                .scalars()
                .all()
            )
            for start in range(0, len(old), BATCH):
                connection.execute(sa.delete(log_table).where(log_table.c.id.in_(old[start : start + BATCH])))
    except DBAPIError as exc:
        log.warning(
            "realtime: trimming the change log failed, trying again later: %s", capture.first_line(exc)
        )


def _log_table():
    return sa.table(
        capture.LOG_TABLE,
        sa.column("id"),
        sa.column("table_name"),
        sa.column("operation"),
        sa.column("new_row"),
        sa.column("old_row"),
        sa.column("created_at"),
    )


def _now():
    """The database's clock in seconds, as the triggers write created_at."""
    if db.engine.dialect.name == "sqlite":
        return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)")
    return sa.func.unix_timestamp(sa.func.now(6))


def _changes(query):
    with db.engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        Change(
            row.id,
            row.table_name,
            row.operation,
            json.loads(row.new_row) if row.new_row else None,
            json.loads(row.old_row) if row.old_row else None,
            float(row.created_at),
        )
        for row in rows
    ]
