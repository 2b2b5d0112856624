"""Changes captured by the database itself: every table with `realtime = true` gets three triggers
(after insert, update and delete) that write the row, as a JSON object, into
minibase_realtime_changes in the writer's own transaction; every table a webhook listens to gets
three more that write into minibase_webhook_events (the webhooks' outbox). So a row written through
/rest/v1, by a function, or by another program with plain SQL is logged exactly when it commits,
and never when it rolls back.

A start makes (or replaces) the triggers its own tables.toml asks for and drops none: two instances
whose files differ for a while (a rolling deploy) would otherwise undo each other. Those of tables
no longer opted in are dropped by `flask --app app realtime prune` (prune below).

MySQL/MariaDB: CREATE TRIGGER needs the TRIGGER privilege on the table, and with binary logging on
also SUPER (or log_bin_trust_function_creators=1). Without them the start-up log says so for each
table, and a subscription to its changes is refused."""

import hashlib
import logging
import threading
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from config import setting
from database.migration_lock import migration_lock
from extensions import db
from rest import policies

log = logging.getLogger("minibase")
PREFIX = "minibase_rt_"
LOG_TABLE = "minibase_realtime_changes"
WEBHOOK_PREFIX = "minibase_wh_"
WEBHOOK_TABLE = "minibase_webhook_events"
PREFIXES = (PREFIX, WEBHOOK_PREFIX)
OPERATIONS = ("INSERT", "UPDATE", "DELETE")
# Installs in this process take turns: several hooks' threads may make one table's triggers at once.
_installing = threading.Lock()
PRIVILEGE = (
    "CREATE TRIGGER needs the TRIGGER privilege, and with binary logging on also SUPER or "
    "log_bin_trust_function_creators=1"
)


def trigger_name(table, operation, prefix=PREFIX):
    """A name within MySQL's 64 characters, whatever the table's: a digest of the table's name."""
    return f"{prefix}{hashlib.sha1(table.encode()).hexdigest()[:20]}_{operation.lower()}"


def install(webhook_tables=None):
    """The triggers of every table opted in to Realtime (or, given `webhook_tables`, of those tables
    for the webhooks), made or replaced where the database holds others than these; {table: None
    when its changes are captured, else why not}. Each refusal is logged. No trigger is dropped.
    Triggers left as they are cost nothing: replacing one waits for every open transaction on its
    table (a metadata lock), and on Galera is a schema change every node makes in turn."""
    webhooks = webhook_tables is not None
    if webhooks:
        wanted = sorted(set(webhook_tables))
    else:
        wanted = sorted(name for name, policy in policies.policies().items() if policy.realtime)
    dialect = db.engine.dialect.name
    captured = {}
    with _installing, _one_instance_at_a_time(dialect, wanted):
        existing = _existing(dialect) if wanted else {}
        for name in wanted:
            captured[name] = _install_one(name, dialect, existing, webhooks)
    for name in wanted:
        if captured[name] is not None:
            what = "webhooks" if webhooks else "realtime"
            log.error("%s: changes of table %r are not captured: %s", what, name, captured[name])
    return captured


@contextmanager
def _one_instance_at_a_time(dialect, needed=True):
    """On MySQL/MariaDB, the instances' migration lease, held while triggers are compared and made
    (or dropped). Two instances making one table's triggers at once on two Galera nodes can wedge a
    node for good: a CREATE TRIGGER takes its metadata locks before its turn in the cluster's
    order, while the other node's, ordered first, is applied there and waits for those locks
    (MariaDB 10.11: the node's applier stopped, and every read there waited). One at a time, the
    second instance finds the first one's triggers and makes none."""
    if dialect != "mysql" or not needed:
        yield
        return
    with db.engine.connect() as connection, migration_lock(connection):
        yield


def prune(webhook_tables):
    """Drop the triggers of tables that this tables.toml no longer opts in: those of Realtime for
    tables without `realtime = true`, those of webhooks for tables no [webhooks.*] names. The names
    of the triggers dropped. Run by hand (`flask --app app realtime prune`), when every instance
    serves the same file."""
    realtime = [name for name, policy in policies.policies().items() if policy.realtime]
    expected = {
        trigger_name(name, operation, prefix)
        for prefix, tables in ((PREFIX, realtime), (WEBHOOK_PREFIX, webhook_tables))
        for name in tables
        for operation in OPERATIONS
    }
    dialect = db.engine.dialect.name
    with _one_instance_at_a_time(dialect):
        stale = sorted(set(_existing(dialect)) - expected)
        for name in stale:
            with db.engine.begin() as connection:
                connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    return stale


def _existing(dialect):
    """{name: what the database holds of it} of our triggers: SQLite's CREATE statement, MySQL's body."""
    if dialect == "sqlite":
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
    else:
        query = (
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = DATABASE()"
        )
    with db.engine.connect() as connection:
        return {name: text for name, text in connection.execute(sa.text(query)) if name.startswith(PREFIXES)}


def _install_one(name, dialect, existing, webhooks=False):
    try:
        table = sa.Table(name, sa.MetaData(), autoload_with=db.engine)
    except NoSuchTableError:
        return "the database has no such table"
    if not list(table.primary_key.columns):
        return "it has no primary key (a change is told by its key)"
    shown = _shown(name, table) if webhooks else _logged(name, table)
    columns = [column for column in table.c if not _binary(column) and column.name in shown]
    prefix, log_table = (WEBHOOK_PREFIX, WEBHOOK_TABLE) if webhooks else (PREFIX, LOG_TABLE)
    made = {op: _statements(table, columns, op, dialect, prefix, log_table) for op in OPERATIONS}
    if all(existing.get(trigger_name(name, op, prefix)) == made[op][0] for op in OPERATIONS):
        return None
    try:
        with db.engine.begin() as connection:
            if dialect == "sqlite":  # sqlite3 opens no transaction for DDL: one, so none is missed
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            for operation in OPERATIONS:
                for statement in made[operation][1]:
                    # PyMySQL formats the text with %: a name's own % must survive it
                    connection.exec_driver_sql(
                        statement if dialect == "sqlite" else statement.replace("%", "%%")
                    )
    except DBAPIError as exc:
        # another instance starting at the same moment may have made the very same triggers
        now = _existing(dialect)
        if all(now.get(trigger_name(name, op, prefix)) == made[op][0] for op in OPERATIONS):
            return None
        return f"the database refused its triggers ({PRIVILEGE}): {first_line(exc)}"
    return None


def _logged(name, table):
    """The columns a change logs: all of them where a row policy may look at any, else only those the
    API exposes, the owner's and the key (the users table's password hash never enters the log)."""
    policy = policies.policies()[name]
    if policy.columns is None or policy.row_policies:
        return set(table.c.keys())
    return {*policy.columns, policy.owner_column, *(column.name for column in table.primary_key.columns)}


def _shown(name, table):
    """The columns a webhook's payload holds: those the API shows (a table's `columns`), all of them
    where it names none; never the users table's password hash."""
    policy = policies.policies().get(name)
    shown = set(table.c.keys()) if policy is None or policy.columns is None else set(policy.columns)
    if name == setting("USERS_TABLE"):
        shown.discard("password")
    return shown


def _binary(column):
    """Bytes have no JSON form (SQLite's json_object refuses them, failing the write): left out."""
    return isinstance(column.type, sa.LargeBinary | sa.types._Binary)


def _statements(table, columns, operation, dialect, prefix=PREFIX, log_table=LOG_TABLE):
    """(what the database will hold of the trigger, as _existing reads it; the statements that make it)."""
    quote = db.engine.dialect.identifier_preparer.quote
    name = trigger_name(table.name, operation, prefix)
    on = f"AFTER {operation} ON {quote(table.name)} FOR EACH ROW"

    def row(alias):
        pairs = ", ".join(
            f"{_literal(column.name, dialect)}, {alias}.{quote(column.name)}" for column in columns
        )
        return f"{'json_object' if dialect == 'sqlite' else 'JSON_OBJECT'}({pairs})"

    new = row("NEW") if operation != "DELETE" else "NULL"
    old = row("OLD") if operation != "INSERT" else "NULL"
    if dialect == "sqlite":
        now = "(julianday('now') - 2440587.5) * 86400.0"
        insert = (
            f"INSERT INTO {log_table} (table_name, operation, new_row, old_row, created_at) "
            f"VALUES ({_literal(table.name, dialect)}, '{operation}', {new}, {old}, {now})"
        )
        create = f"CREATE TRIGGER {name} {on} BEGIN {insert}; END"
        return create, [f"DROP TRIGGER IF EXISTS {name}", create]
    insert = (
        f"INSERT INTO {log_table} (table_name, operation, new_row, old_row, created_at) "
        f"VALUES ({_literal(table.name, dialect)}, '{operation}', {new}, {old}, UNIX_TIMESTAMP(NOW(6)))"
    )
    if getattr(db.engine.dialect, "is_mariadb", False):  # replaced at once: no write goes uncaptured
        return insert, [f"CREATE OR REPLACE TRIGGER {name} {on} {insert}"]
    return insert, [f"DROP TRIGGER IF EXISTS {name}", f"CREATE TRIGGER {name} {on} {insert}"]


def _literal(text, dialect):
    """An SQL string literal of a name (a table's or a column's, from the database itself)."""
    if dialect != "sqlite":
        text = text.replace("\\", "\\\\")  # MySQL reads a backslash as an escape
    return "'" + text.replace("'", "''") + "'"


def first_line(exc):
    """The database's own words (a missing privilege), for the operator's log; never row data."""
    return str(getattr(exc, "orig", exc)).splitlines()[0][:300]
