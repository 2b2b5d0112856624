"""Changes captured by the database itself: every table with `realtime = true` gets three triggers
(after insert, update and delete) that write the row, as a JSON object, into
minibase_realtime_changes in the writer's own transaction. So a row written through /rest/v1, by a
function, or by another program with plain SQL is logged exactly when it commits, and never when
it rolls back. Made (or replaced) when Realtime starts; those of tables that no longer opt in are
dropped.

MySQL/MariaDB: CREATE TRIGGER needs the TRIGGER privilege on the table, and with binary logging on
also SUPER (or log_bin_trust_function_creators=1). Without them the start-up log says so for each
table, and a subscription to its changes is refused."""

import hashlib
import logging

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from extensions import db
from rest import policies

log = logging.getLogger("minibase")
PREFIX = "minibase_rt_"
LOG_TABLE = "minibase_realtime_changes"
OPERATIONS = ("INSERT", "UPDATE", "DELETE")
PRIVILEGE = (
    "CREATE TRIGGER needs the TRIGGER privilege, and with binary logging on also SUPER or "
    "log_bin_trust_function_creators=1"
)


def trigger_name(table, operation):
    """A name within MySQL's 64 characters, whatever the table's: a digest of the table's name."""
    return f"{PREFIX}{hashlib.sha1(table.encode()).hexdigest()[:20]}_{operation.lower()}"


def install():
    """The triggers of every opted-in table, made or replaced where the database holds others than
    these; {table: None when its changes are captured, else why not}. Each refusal is logged.
    Triggers left as they are cost nothing: replacing one waits for every open transaction on its
    table (a metadata lock), and on Galera is a schema change every node makes in turn."""
    wanted = sorted(name for name, policy in policies.policies().items() if policy.realtime)
    dialect = db.engine.dialect.name
    expected = {trigger_name(name, operation) for name in wanted for operation in OPERATIONS}
    captured = {}
    try:
        existing = _existing(dialect)
        for stale in sorted(set(existing) - expected):
            with db.engine.begin() as connection:
                connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {stale}")
    except DBAPIError as exc:
        log.warning("realtime: cannot drop the triggers of tables no longer opted in: %s", first_line(exc))
    for name in wanted:
        captured[name] = _install_one(name, dialect, existing)
        if captured[name] is not None:
            log.error("realtime: changes of table %r are not captured: %s", name, captured[name])
    return captured


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
        return {name: text for name, text in connection.execute(sa.text(query)) if name.startswith(PREFIX)}


def _install_one(name, dialect, existing):
    try:
        table = sa.Table(name, sa.MetaData(), autoload_with=db.engine)
    except NoSuchTableError:
        return "the database has no such table"
    if not list(table.primary_key.columns):
        return "it has no primary key (a change is told by its key)"
    columns = [column for column in table.c if not _binary(column) and column.name in _logged(name, table)]
    made = {operation: _statements(table, columns, operation, dialect) for operation in OPERATIONS}
    if all(existing.get(trigger_name(name, operation)) == made[operation][0] for operation in OPERATIONS):
        return None
    try:
        with db.engine.begin() as connection:
            for operation in OPERATIONS:
                for statement in made[operation][1]:
                    # PyMySQL formats the text with %: a name's own % must survive it
                    connection.exec_driver_sql(
                        statement if dialect == "sqlite" else statement.replace("%", "%%")
                    )
    except DBAPIError as exc:
        return f"the database refused its triggers ({PRIVILEGE}): {first_line(exc)}"
    return None


def _logged(name, table):
    """The columns a change logs: all of them where a row policy may look at any, else only those the
    API exposes, the owner's and the key (the users table's password hash never enters the log)."""
    policy = policies.policies()[name]
    if policy.columns is None or policy.row_policies:
        return set(table.c.keys())
    return {*policy.columns, policy.owner_column, *(column.name for column in table.primary_key.columns)}


def _binary(column):
    """Bytes have no JSON form (SQLite's json_object refuses them, failing the write): left out."""
    return isinstance(column.type, sa.LargeBinary | sa.types._Binary)


def _statements(table, columns, operation, dialect):
    """(what the database will hold of the trigger, as _existing reads it; the statements that make it)."""
    quote = db.engine.dialect.identifier_preparer.quote
    name = trigger_name(table.name, operation)
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
            f"INSERT INTO {LOG_TABLE} (table_name, operation, new_row, old_row, created_at) "
            f"VALUES ({_literal(table.name, dialect)}, '{operation}', {new}, {old}, {now})"
        )
        create = f"CREATE TRIGGER {name} {on} BEGIN {insert}; END"
        return create, [f"DROP TRIGGER IF EXISTS {name}", create]
    insert = (
        f"INSERT INTO {LOG_TABLE} (table_name, operation, new_row, old_row, created_at) "
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
