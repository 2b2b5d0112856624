"""Alembic environment: migrates the service's own tables, one instance at a time."""

from alembic import context
from flask import current_app

from database.migration_lock import LOCK_TABLE, migration_lock


def include_object(obj, name, type_, reflected, compare_to):
    # Autogenerate must never touch the tables of the application that shares the database.
    return type_ != "table" or (name.startswith("minibase_") and name != LOCK_TABLE)


def run_migrations():
    migrate = current_app.extensions["migrate"]
    with migrate.db.engine.connect() as connection, migration_lock(connection) as lease:
        context.configure(
            connection=connection,
            target_metadata=migrate.db.metadata,
            include_object=include_object,
            on_version_apply=lease.check if lease else None,  # a lost lease stops before the next step
            **migrate.configure_args,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `flask --app app db upgrade`")
run_migrations()
