"""What a database error means: one to try again (another transaction won, the connection was lost
before COMMIT), the database not answering (a 503) rather than refusing the statement, and how it
is named in a log line (never its text)."""

from sqlalchemy.exc import DBAPIError

import metrics

# MySQL/MariaDB: a lock wait timed out; a deadlock (or a Galera certification failure); a SAVEPOINT
# that no longer exists, because the server rolled the whole transaction back under it (a deadlock
# met inside the savepoint): each a conflict the database resolved by rolling back, never the query's.
RETRYABLE_CODES = frozenset({1205, 1213, 1305})


def error_code(exc):
    """The database's own error number of a DBAPIError (MySQL's errno), or None."""
    args = getattr(getattr(exc, "orig", exc), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def describe(exc):
    """The database error's class and number, for a log line: never its text, which can quote the
    data (a password hash included)."""
    orig = getattr(exc, "orig", exc)
    code = error_code(exc)
    name = type(orig).__name__
    return f"{name} {code}" if code is not None else name


def retryable(exc, committing=False):
    """Whether a unit that failed with `exc` may simply run again."""
    if not isinstance(exc, DBAPIError):
        return False
    if error_code(exc) in RETRYABLE_CODES:
        return True
    return exc.connection_invalidated and not committing


# What says the database is not answering (or not in time), rather than refusing a statement: SQLite's
# result codes, before any extended part (SQLITE_IOERR_READ is SQLITE_IOERR); MySQL's and MariaDB's
# error numbers, besides the client's own (2000-2999: no connection, connection lost).
SQLITE_UNAVAILABLE = frozenset(
    {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN", "SQLITE_INTERRUPT",
     "SQLITE_NOMEM", "SQLITE_READONLY", "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_PROTOCOL", "SQLITE_PERM"}
)  # fmt: skip


MYSQL_UNAVAILABLE = frozenset(
    {
        1021, 1037, 1038, 1040, 1041, 1045, 1047, 1053, 1129, 1130,  # disk, memory, connections, access
        1152, 1153, 1154, 1155, 1156, 1157, 1158, 1159, 1160, 1161,  # the network
        1205, 1213, 1290, 1305, 1317, 1927, 1969, 3024,  # lock waits, rolled back, read-only, killed,
        4031,  # time limits
        1114,  # a table that is full: InnoDB's on a full disk, a MEMORY table at its size
        1180,  # a COMMIT that failed: a Galera node cut off from the others (it may have committed)
    }
)  # fmt: skip


def unavailable(exc):
    """Whether a database error means the database is not answering, which is a 503; anything else
    it raised refused the statement (a regular expression MariaDB cannot run, a pattern too long
    for SQLite), which is no reason to say it is down."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    name = getattr(exc.orig, "sqlite_errorname", None)
    if name is not None:
        return "_".join(name.split("_")[:2]) in SQLITE_UNAVAILABLE
    code = error_code(exc)
    return code is None or 2000 <= code < 3000 or code in MYSQL_UNAVAILABLE


def counted(exc):
    """Count a deadlock or a lock wait that timed out in the metrics."""
    code = error_code(exc)
    if code == 1213:
        metrics.DB_DEADLOCKS.inc()
    elif code == 1205:
        metrics.DB_LOCK_WAIT_TIMEOUTS.inc()
