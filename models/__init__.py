"""The service's own tables and the users table as another application may have made it: the
users table reflected and checked, and the one upsert statement of both databases. The service's
tables are in models/auth.py, models/storage.py and models/changes.py, each imported here so that
db.metadata (which the migrations and a test compare with the database) holds every one."""

import logging

from sqlalchemy import MetaData, PrimaryKeyConstraint, Table, UniqueConstraint
from sqlalchemy.dialects import mysql, sqlite

from config import setting
from extensions import db, state

log = logging.getLogger("minibase")

# Prefixed so they cannot collide with the tables of the application that shares the database.
SERVICE_TABLES = (
    "minibase_sessions",
    "minibase_refresh_tokens",
    "minibase_profiles",
    "minibase_signup_locks",
    "minibase_failed_sign_ins",
    "minibase_one_time_tokens",
    "minibase_email_sends",
    "minibase_mfa_factors",
    "minibase_mfa_challenges",
    "minibase_flow_states",
    "minibase_identities",
    "minibase_webauthn_credentials",
    "minibase_webauthn_challenges",
    "minibase_storage_buckets",
    "minibase_storage_objects",
    "minibase_realtime_changes",
    "minibase_webhook_events",
    "minibase_webhook_deliveries",
    "minibase_webhook_attempts",
    "minibase_schedule_runs",
    "minibase_callouts",
    "minibase_audit_log",
    "minibase_dashboard_sessions",
    "minibase_alembic_version",
)
USER_COLUMNS = (
    "user_id",
    "email",
    "password",
    "username",
    "first_name",
    "last_name",
    "active",
    "joined",
)
PROFILE_FIELDS = ("username", "first_name", "last_name")
METADATA_COLUMNS = (*PROFILE_FIELDS, "about")  # shown in user_metadata, beside the profile's `extra`


def users_table():
    """The users table as it is in the database, reflected once per app."""
    cache = state()
    if cache.users is None:
        name = setting("USERS_TABLE")
        table = Table(name, MetaData(), autoload_with=db.engine)
        missing = [c for c in USER_COLUMNS if c not in table.c]
        if missing:
            raise RuntimeError(f"users table {name!r} lacks the columns {', '.join(missing)}")
        cache.email_is_unique = email_is_unique(table)
        if not cache.email_is_unique:
            log.warning(
                "users table %r has no unique index on email: sign-ups of one address are "
                "serialized through minibase_signup_locks instead",
                name,
            )
        cache.users = table
    return cache.users


def email_is_unique(table):
    """Whether a unique index or constraint on the email column alone guards the users table."""
    for index in table.indexes:
        if index.unique and [column.name for column in index.columns] == ["email"]:
            return True
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint | PrimaryKeyConstraint):
            if [column.name for column in constraint.columns] == ["email"]:
                return True
    return False


def required_without_default(table):
    """Columns a legacy users table requires that minibase may not fill: they get '' instead of NULL."""
    return {
        c.name for c in table.c if c.name in PROFILE_FIELDS and not c.nullable and c.server_default is None
    }


def upsert(table, values, keys, update=None):
    """INSERT, or UPDATE the row whose `keys` match (with `update`, by default the other values; {}
    changes nothing but still locks the row): one statement on SQLite and MySQL alike."""
    dialect = db.session.get_bind().dialect.name
    if update is None:
        update = {k: v for k, v in values.items() if k not in keys}
    if dialect == "mysql":
        statement = mysql.insert(table).values(values)
        statement = statement.on_duplicate_key_update(**update or {keys[0]: values[keys[0]]})
    else:
        statement = sqlite.insert(table).values(values)
        if update:
            statement = statement.on_conflict_do_update(index_elements=keys, set_=update)
        else:
            statement = statement.on_conflict_do_nothing(index_elements=keys)
    db.session.execute(statement)


from models import auth, changes, storage  # noqa: E402, F401 (every table in db.metadata)
