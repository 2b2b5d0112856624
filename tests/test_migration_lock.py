"""One instance migrates at a time, however long its migration runs: on MySQL/MariaDB its lease is
renewed while it migrates, and an instance that loses it stops; beside SQLite a file lock holds.
The lease is shortened to a second here; a step is made slow for real, by a transaction of the test
that holds what the step must wait for."""

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

import config
from app import MIGRATIONS, create_app
from database import migration_lock
from extensions import db, migrate
from support import SECRET, eventually

LEASE = 1  # second
SLOW_TABLE = "minibase_storage_buckets"  # 0014 alters it on MySQL; on SQLite it only writes its version
# An instance starting: it migrates at start, with its lease shortened.
INSTANCE = f"""
from database import migration_lock
migration_lock.LEASE_SECONDS = {LEASE}
from app import create_app
print("imported", flush=True)
input()
print("ready" if create_app().extensions["minibase"].database_ready else "not ready")
"""


def instances(database_url, count):
    """`count` service processes on `database_url`, their imports done: each starts, and migrates,
    when go() is called on it. A migration step may wait on a lock for 30 s (DB_TIMEOUT)."""
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": SECRET, "PYTHONPATH": str(config.ROOT),
           "DB_TIMEOUT": "30", "STATEMENT_TIMEOUT": "30"}  # fmt: skip
    started = [
        subprocess.Popen(
            [sys.executable, "-c", INSTANCE],
            env=env,
            cwd=config.ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for _ in range(count)
    ]
    for process in started:
        assert process.stdout.readline() == "imported\n", process.stderr.read()[-2000:]
    return started


def go(process):
    process.stdin.write("\n")
    process.stdin.flush()
    return process


def finish(process):
    """(what it printed last, its log), once it has started."""
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, err[-2000:]
    return out.strip(), err


@pytest.fixture
def at_0013(database_url):
    """The database migrated to 0013, and a connection of the test's own to it."""
    app = create_app({"DATABASE_URL": database_url, "JWT_SECRET": SECRET, "AUTO_MIGRATE": False})
    with app.app_context():
        command.upgrade(migrate.get_config(str(MIGRATIONS)), "0013")
        db.engine.dispose()
    engine = create_engine(database_url)
    with engine.connect() as connection:
        yield connection
    engine.dispose()


def hold_what_0014_needs(connection):
    """A transaction that the last step must wait for: on MariaDB a read of the table it alters (a
    metadata lock), on SQLite a write lock on the database."""
    if connection.dialect.name == "mysql":
        connection.execute(text(f"SELECT * FROM {SLOW_TABLE}")).all()
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def alters_waiting(connection):
    """ALTER TABLE statements of this database in the server's process list."""
    query = (
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'ALTER %'"
    )
    return connection.execute(text(query)).scalar()


def versions(connection):
    return connection.execute(text("SELECT version_num FROM minibase_alembic_version")).scalars().all()


def migrating(connection):
    """Whether an instance is in 0014, waiting on the test: its ALTER on MariaDB; beside SQLite, the
    file lock it holds."""
    if connection.dialect.name == "mysql":
        return alters_waiting(connection) == 1
    with open(Path(connection.engine.url.database).with_suffix(".migrate-lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def test_a_migration_longer_than_the_lease_keeps_it(database_url, backend, at_0013):
    test = at_0013
    hold_what_0014_needs(test)
    try:
        first, second = instances(database_url, 2)
        go(first)
        eventually(lambda: migrating(test), 15, 0.05)
        time.sleep(2 * LEASE)  # the first one's lease would have run out, unrenewed
        go(second)
        time.sleep(3 * LEASE)  # long enough for it to take an expired lease, 15 tries
        assert first.poll() is None and second.poll() is None  # the first waits on the test, the second on it
        if backend == "mysql":
            assert alters_waiting(test) == 1  # one instance in 0014, not two
    finally:
        test.rollback()
    assert finish(first)[0] == finish(second)[0] == "ready"
    assert versions(test) == [ScriptDirectory(str(MIGRATIONS)).get_current_head()]


def test_an_instance_that_loses_its_lease_stops_migrating(database_url, backend, at_0013):
    if backend != "mysql":
        pytest.skip("a file lock is held until its process lets it go or ends")
    test = at_0013
    hold_what_0014_needs(test)
    try:
        (first,) = instances(database_url, 1)
        go(first)
        eventually(lambda: alters_waiting(test) == 1, 15, 0.05)
        with test.engine.connect() as another:  # takes the lease over, as one whose clock ran ahead
            another.execute(text(
                "UPDATE minibase_migration_lock SET holder = 'another',"
                " expires_at = UTC_TIMESTAMP() + INTERVAL 1 HOUR"
            ))  # fmt: skip
            another.commit()
        eventually(
            lambda: alters_waiting(test) == 0, 15, 0.05
        )  # its ALTER was stopped, not left to run beside another's
        out, log = finish(first)
        assert out == "not ready" and "lost the migration lease (another instance took it)" in log
    finally:
        test.rollback()
    assert versions(test) == ["0013"]
    precision = test.execute(text(
        "SELECT DATETIME_PRECISION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
        f" AND TABLE_NAME = '{SLOW_TABLE}' AND COLUMN_NAME = 'created_at'"
    )).scalar()  # fmt: skip
    assert precision == 0
    lock = test.execute(text("SELECT holder FROM minibase_migration_lock")).scalar()
    assert lock == "another"  # the lease stays the taker's: the loser released nothing


def test_a_lost_lease_stops_the_migration_before_its_next_step(database_url, backend, at_0013, monkeypatch):
    """Between two steps, with no statement to kill: the next step's check refuses to go on."""
    if backend != "mysql":
        pytest.skip("a file lock is held until its process lets it go or ends")
    monkeypatch.setattr(migration_lock, "LEASE_SECONDS", LEASE)
    test = at_0013
    with test.engine.connect() as connection, migration_lock.migration_lock(connection) as lease:
        lease.check()  # held, and renewed past its first second
        time.sleep(2 * LEASE)
        lease.check()
        test.execute(text("UPDATE minibase_migration_lock SET holder = 'another'"))
        test.commit()
        eventually(lambda: lease.lost is not None, 15, 0.05)
        with pytest.raises(migration_lock.LeaseLost, match="another instance took it"):
            lease.check()
    assert test.execute(text("SELECT holder FROM minibase_migration_lock")).scalar() == "another"
