"""Bounded waits on the database: connect, read and lock timeouts (DB_TIMEOUT), a time limit on each
statement (STATEMENT_TIMEOUT), deadlocks retried, and every request's transaction ended explicitly,
so that a database that stops, freezes or drops the connection answers a JSON 503 in bounded time."""

import functools
import logging
import math
import time

from flask import current_app, request
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from errors import database_code, unavailable
from extensions import db

log = logging.getLogger("minibase")

ATTEMPTS = 3  # of a transaction the database chose as a deadlock victim, or whose lock wait timed out
# MySQL/MariaDB: 1205 lock wait timeout, 1213 deadlock.
RETRYABLE_CODES = {1205, 1213}


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
            record.info["deadline"] = [math.inf]
            deadline = record.info["deadline"]
            # Called every 1,000 virtual-machine steps: a non-zero answer interrupts the statement.
            dbapi_connection.set_progress_handler(lambda: time.monotonic() > deadline[0], 1000)
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
            else:  # MySQL bounds SELECTs only; writes are bounded by the lock wait and DB_TIMEOUT
                cursor.execute(f"SET SESSION max_execution_time = {int(statement_timeout * 1000)}")
        cursor.close()

    def before_statement(conn, cursor, statement, parameters, context, executemany):
        deadline = conn.connection._connection_record.info.get("deadline")
        if deadline is not None:
            deadline[0] = time.monotonic() + statement_timeout

    with app.app_context():
        event.listen(db.engine, "connect", on_connect)
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "before_cursor_execute", before_statement)


def retryable(exc):
    """Whether the database refused `exc`'s transaction only because of another one: try again."""
    code = getattr(getattr(exc, "orig", None), "args", (None,))[0]
    return isinstance(exc, DBAPIError) and code in RETRYABLE_CODES


def retrying(operation):
    """Run `operation`, a whole transaction that commits at its end, again when the database chose it
    as a deadlock victim or a lock wait timed out; past ATTEMPTS the error goes on (a 503)."""

    @functools.wraps(operation)
    def wrapped(*args, **kwargs):
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return operation(*args, **kwargs)
            except DBAPIError as exc:
                db.session.rollback()
                if attempt == ATTEMPTS or not retryable(exc):
                    raise
                log.info("%s: %s, trying again", operation.__name__, database_code(exc))
                time.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    return wrapped


def end_transaction(response):
    """after_request: end the request's transaction (a read's included) while errors still become
    JSON: a connection that dies here gives the documented 503, not a bare 500 from teardown."""
    if not db.session.registry.has():
        return response  # the request never used the database: no session to make only to close it
    try:
        db.session.close()  # rolls back and returns the connection: the teardown then has nothing to do
    except DBAPIError as exc:
        log.error(
            "database unavailable at the end of %s %s: %s", request.method, request.path, database_code(exc)
        )
        db.session().invalidate()  # the connection is gone: the pool must not hand it out again
        return current_app.make_response(unavailable())
    return response
