"""Alembic environment: migrates the service's own tables, one instance at a time."""

import fcntl
import random
import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from alembic import context
from flask import current_app
from sqlalchemy.exc import DBAPIError

from database.transactions import RETRYABLE_CODES, error_code

LOCK_TABLE = "minibase_migration_lock"
LOCK_TIMEOUT = 60  # seconds an instance waits for another's migration, and how long a lock is held
POLL_SECONDS = 0.2


@contextmanager
def migration_lock(connection):
    """Hold a lock across instances while migrating: a lock row on MySQL, a file lock beside SQLite."""
    if connection.dialect.name == "mysql":
        holder = take_lock_row(connection)
        try:
            yield
        finally:
            release_lock_row(connection, holder)
        return
    database = connection.engine.url.database
    if not database or database == ":memory:":
        yield
        return
    with open(Path(database).with_suffix(".migrate-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# GET_LOCK and row locks hold only on the node that took them: on a Galera cluster three instances
# started at once on three nodes would each take "the" lock and run the same DDL (1050, 1684). A row
# that every instance writes is a lock on every node: of writes to it that race on different nodes,
# the cluster certifies one and refuses the others at COMMIT (1213), and they read it again.
# The row holds a lease, not a session lock, so that an instance killed while migrating blocks the
# others for LOCK_TIMEOUT at most.
TAKE = (
    f"INSERT INTO {LOCK_TABLE} (id, holder, expires_at) VALUES (1, %(me)s, %(until)s) "
    "ON DUPLICATE KEY UPDATE"
    " holder = IF(holder IS NULL OR expires_at < %(now)s, VALUES(holder), holder),"
    " expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)"
)


def take_lock_row(connection):
    """Wait until this instance holds the migration lock row; its holder id."""
    connection.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (id INT NOT NULL PRIMARY KEY, holder VARCHAR(32), "
        "expires_at DATETIME) ENGINE=InnoDB"
    )
    connection.commit()
    me = uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        try:
            row = connection.exec_driver_sql(
                f"SELECT holder, expires_at FROM {LOCK_TABLE} WHERE id = 1"
            ).first()
            if row is None or row.holder is None or row.expires_at < now:
                until = now + timedelta(seconds=LOCK_TIMEOUT)
                connection.exec_driver_sql(TAKE, {"me": me, "until": until, "now": now})
                row = connection.exec_driver_sql(f"SELECT holder FROM {LOCK_TABLE} WHERE id = 1").first()
            connection.commit()
            if row.holder == me:
                return me
        except DBAPIError as exc:
            connection.rollback()
            if error_code(exc) not in RETRYABLE_CODES:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError("another instance is migrating the database; gave up waiting")
        time.sleep(POLL_SECONDS * random.uniform(0.5, 1.5))


def release_lock_row(connection, holder):
    for _attempt in range(10):
        try:
            connection.rollback()  # whatever a failed migration left open
            connection.exec_driver_sql(
                f"UPDATE {LOCK_TABLE} SET holder = NULL, expires_at = NULL WHERE id = 1 AND holder = %(me)s",
                {"me": holder},
            )
            connection.commit()
            return
        except DBAPIError as exc:
            connection.rollback()
            if error_code(exc) not in RETRYABLE_CODES:
                raise
            time.sleep(POLL_SECONDS * random.uniform(0.5, 1.5))


def include_object(obj, name, type_, reflected, compare_to):
    # Autogenerate must never touch the tables of the application that shares the database.
    return type_ != "table" or (name.startswith("minibase_") and name != LOCK_TABLE)


def run_migrations():
    migrate = current_app.extensions["migrate"]
    with migrate.db.engine.connect() as connection, migration_lock(connection):
        context.configure(
            connection=connection,
            target_metadata=migrate.db.metadata,
            include_object=include_object,
            **migrate.configure_args,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `flask --app app db upgrade`")
run_migrations()
