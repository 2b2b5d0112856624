"""Alembic environment: migrates the service's own tables, one instance at a time."""

import fcntl
from contextlib import contextmanager
from pathlib import Path

from alembic import context
from flask import current_app

LOCK_NAME = "minibase_migrations"
LOCK_TIMEOUT = 60


@contextmanager
def migration_lock(connection):
    """Hold a lock across instances while migrating: MySQL's GET_LOCK, a file lock beside SQLite."""
    if connection.dialect.name == "mysql":
        got = connection.exec_driver_sql(f"SELECT GET_LOCK('{LOCK_NAME}', {LOCK_TIMEOUT})").scalar()
        connection.commit()
        if got != 1:
            raise RuntimeError("another instance is migrating the database; gave up waiting")
        try:
            yield
        finally:
            connection.exec_driver_sql(f"SELECT RELEASE_LOCK('{LOCK_NAME}')")
            connection.commit()
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


def include_object(obj, name, type_, reflected, compare_to):
    # Autogenerate must never touch the tables of the application that shares the database.
    return type_ != "table" or name.startswith("minibase_")


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
