"""Bounded waits on the database: connect, read and lock timeouts (DB_TIMEOUT) and a time limit on
each statement (STATEMENT_TIMEOUT), set on every new connection, so that a database that stops,
freezes or drops the connection answers a JSON 503 in bounded time; on a Galera cluster node, reads
that see every write the cluster committed before them (causal reads). SQLite connections also get
the REGEXP function the match/imatch filters use."""

import math

from sqlalchemy import event

import filters
from database import transactions
from extensions import db


def init_app(app):
    """Per-connection settings and the statement time limit, on this app's engine."""
    db_timeout = app.config["DB_TIMEOUT"]
    statement_timeout = app.config["STATEMENT_TIMEOUT"]

    def on_connect(dbapi_connection, record):
        cursor = dbapi_connection.cursor()
        if type(dbapi_connection).__module__.startswith("sqlite3"):
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(db_timeout * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            # `col REGEXP pattern` (match/imatch filters) calls regexp(pattern, col) in Python.
            dbapi_connection.create_function("regexp", 2, filters.sqlite_regexp, deterministic=True)
            deadline = record.info["deadline"] = transactions.Deadline(statement_timeout)
            # Called every 1,000 virtual-machine steps: a true answer interrupts the statement.
            dbapi_connection.set_progress_handler(deadline.passed, 1000)
        else:
            # Strict mode: a value that does not fit is an error, not silently truncated data.
            cursor.execute(
                "SET SESSION sql_mode = TRIM(BOTH ',' FROM CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES'))"
            )
            cursor.execute("SET SESSION time_zone = '+00:00'")
            lock_wait = max(1, math.ceil(db_timeout))
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_wait}")
            cursor.execute(f"SET SESSION lock_wait_timeout = {lock_wait}")
            if "mariadb" in str(getattr(dbapi_connection, "server_version", "")).lower():
                cursor.execute(f"SET SESSION max_statement_time = {float(statement_timeout)}")
                cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
                if (cursor.fetchone() or ("", "OFF"))[1] == "ON":
                    # A Galera node applies what others committed a moment later: a read waits until
                    # this node has applied everything committed before it, so that a logout on one
                    # node is refused on the next request to any other.
                    cursor.execute("SET SESSION wsrep_sync_wait = 1")
            else:  # MySQL bounds SELECTs only; writes are bounded by the lock wait and DB_TIMEOUT
                cursor.execute(f"SET SESSION max_execution_time = {int(statement_timeout * 1000)}")
        cursor.close()

    with app.app_context():
        event.listen(db.engine, "connect", on_connect)
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "before_cursor_execute", transactions.start_deadline)
