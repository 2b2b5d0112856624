"""One instance at a time migrates a database: a file lock beside SQLite, and on MySQL/MariaDB a
lease on the one row of a table, renewed while the migration runs."""

import fcntl
import random
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from database.failures import RETRYABLE_CODES, error_code
from database.transactions import on_connection

LOCK_TABLE = "minibase_migration_lock"
LEASE_SECONDS = 60  # how long a lease lasts unrenewed: an instance killed while migrating holds others back
RENEWALS_PER_LEASE = 4  # a renewal that fails is tried three more times before the lease runs out
POLL_SECONDS = 0.2


class LeaseLost(RuntimeError):
    """Another instance took the migration lease (or it could not be renewed in time): this instance
    stops migrating rather than migrate beside it."""


@contextmanager
def migration_lock(connection):
    """Hold the lock across instances while migrating on `connection`; yields what the migration
    checks between its steps (Lease.check), or None where the lock cannot be lost."""
    if connection.dialect.name == "mysql":
        lease = Lease(connection, take_lock_row(connection))
        try:
            with lease:
                yield lease
        except Exception as exc:
            if isinstance(exc, LeaseLost) or lease.lost is None:
                raise
            raise lease.stopped() from exc  # its connection was killed: say why
        return
    database = connection.engine.url.database
    if not database or database == ":memory:":
        yield None
        return
    with open(Path(database).with_suffix(".migrate-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# GET_LOCK and row locks hold only on the node that took them: on a Galera cluster three instances
# started at once on three nodes would each take "the" lock and run the same DDL (1050, 1684). A row
# that every instance writes is a lock on every node: of writes to it that race on different nodes,
# the cluster certifies one and refuses the others at COMMIT (1213), and they read it again.
# The row holds a lease, not a session lock, so that an instance killed while migrating blocks the
# others for LEASE_SECONDS at most. Its times are the database's clock, which every instance shares.
TAKE = (
    f"INSERT INTO {LOCK_TABLE} (id, holder, expires_at)"
    " VALUES (1, %(me)s, UTC_TIMESTAMP() + INTERVAL %(lease)s SECOND) "
    "ON DUPLICATE KEY UPDATE"
    " holder = IF(holder IS NULL OR expires_at < UTC_TIMESTAMP(), VALUES(holder), holder),"
    " expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)"
)
READ = f"SELECT holder, expires_at, expires_at < UTC_TIMESTAMP() AS expired FROM {LOCK_TABLE} WHERE id = 1"
RENEW = (
    f"UPDATE {LOCK_TABLE} SET expires_at = UTC_TIMESTAMP() + INTERVAL %(lease)s SECOND"
    " WHERE id = 1 AND holder = %(me)s"
)


def take_lock_row(connection):
    """Wait until this instance holds the migration lease; its holder id. It waits as long as the
    holder renews its lease (a long migration), and takes a lease its holder let run out."""
    on_connection(connection, _make_lock_table)
    me = uuid.uuid4().hex
    seen, deadline = None, time.monotonic() + 2 * LEASE_SECONDS
    while True:
        try:
            row = on_connection(connection, _take_if_free, me)
            if row.holder == me:
                return me
            if (row.holder, row.expires_at) != seen:  # taken or renewed since: its holder is alive
                seen, deadline = (row.holder, row.expires_at), time.monotonic() + 2 * LEASE_SECONDS
        except DBAPIError as exc:
            if error_code(exc) not in RETRYABLE_CODES:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(
                "another instance holds the migration lease and does not renew it; gave up waiting"
            )
        time.sleep(POLL_SECONDS * random.uniform(0.5, 1.5))


def _make_lock_table(connection):
    connection.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (id INT NOT NULL PRIMARY KEY, holder VARCHAR(32), "
        "expires_at DATETIME) ENGINE=InnoDB"
    )


def _take_if_free(connection, me):
    """The lock row, taken for `me` if no one held it or its lease had run out."""
    row = connection.exec_driver_sql(READ).first()
    if row is None or row.holder is None or row.expired:
        connection.exec_driver_sql(TAKE, {"me": me, "lease": LEASE_SECONDS})
        row = connection.exec_driver_sql(READ).first()
    return row


def release_lock_row(connection, holder):
    for _attempt in range(10):
        try:
            connection.rollback()  # whatever a failed migration left open
            on_connection(connection, _release, holder)
            return
        except DBAPIError as exc:
            if error_code(exc) not in RETRYABLE_CODES:
                raise
            time.sleep(POLL_SECONDS * random.uniform(0.5, 1.5))


def _release(connection, holder):
    connection.exec_driver_sql(
        f"UPDATE {LOCK_TABLE} SET holder = NULL, expires_at = NULL WHERE id = 1 AND holder = %(me)s",
        {"me": holder},
    )


class Lease:
    """The lease `holder` took for the migration running on `connection`, renewed by a thread of its
    own on another connection every LEASE_SECONDS / RENEWALS_PER_LEASE. Once it is lost (another
    holder in the row, or no renewal for a whole lease), the thread kills the migration's connection
    (where it reaches the same server), and check() stops the migration before its next step."""

    def __init__(self, connection, holder):
        self.connection, self.holder = connection, holder
        self.lost = None  # why, once lost
        self.valid_until = time.monotonic() + LEASE_SECONDS  # by this process's clock, at the least
        self._stop = threading.Event()
        self._server = on_connection(connection, _server_of)
        self._thread = threading.Thread(target=self._renew, name="migration-lease", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        if self.lost is None:
            release_lock_row(self.connection, self.holder)

    def check(self, **_step):
        """Raise LeaseLost once the lease is lost, or has not been renewed for a whole lease: after
        each step of the migration (Alembic's on_version_apply), before the next."""
        if self.lost is None and time.monotonic() >= self.valid_until:
            self.lost = "not renewed in time"
        if self.lost is not None:
            raise self.stopped()

    def stopped(self):
        return LeaseLost(f"lost the migration lease ({self.lost}): this instance stopped migrating")

    def _renew(self):
        every = LEASE_SECONDS / RENEWALS_PER_LEASE
        while self.lost is None and not self._stop.wait(every):
            started = time.monotonic()
            try:
                with self.connection.engine.connect() as connection:
                    renewed = on_connection(connection, _renew_lease, self.holder)
                    if renewed != 1:
                        self._lose(connection, "another instance took it")
                        return
            except DBAPIError:
                if time.monotonic() >= self.valid_until:
                    self.lost = "not renewed in time"
                continue
            self.valid_until = started + LEASE_SECONDS

    def _lose(self, connection, why):
        """Mark the lease lost, and kill the migration's connection if this one reaches its server."""
        self.lost = why
        try:
            here = connection.exec_driver_sql("SELECT CONNECTION_ID(), @@hostname, @@port").first()
            if (here[1], here[2]) == (self._server[1], self._server[2]):  # never a namesake elsewhere
                connection.exec_driver_sql(f"KILL CONNECTION {int(self._server[0])}")
        except DBAPIError:
            pass  # the migration stops at its next step (check), or fails on a database it cannot reach


def _server_of(connection):
    """(connection id, host, port) of `connection`: where its migration runs, for a KILL."""
    return connection.exec_driver_sql("SELECT CONNECTION_ID(), @@hostname, @@port").first()


def _renew_lease(connection, holder):
    """How many rows the renewal changed: 0 when another instance holds the lease now."""
    return connection.exec_driver_sql(RENEW, {"me": holder, "lease": LEASE_SECONDS}).rowcount
