"""Bounded waits on the database: connect, read and lock timeouts (DB_TIMEOUT), a time limit on each
statement (STATEMENT_TIMEOUT), deadlocks retried, and every request's transaction ended explicitly,
so that a database that stops, freezes or drops the connection answers a JSON 503 in bounded time."""

import functools
import logging
import math
import time
from collections import namedtuple
from dataclasses import dataclass, field

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
            deadline = record.info["deadline"] = Deadline(statement_timeout)
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
            else:  # MySQL bounds SELECTs only; writes are bounded by the lock wait and DB_TIMEOUT
                cursor.execute(f"SET SESSION max_execution_time = {int(statement_timeout * 1000)}")
        cursor.close()

    def before_statement(conn, cursor, statement, parameters, context, executemany):
        deadline = conn.connection._connection_record.info.get("deadline")
        if deadline is not None:
            deadline.start()

    with app.app_context():
        event.listen(db.engine, "connect", on_connect)
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "before_cursor_execute", before_statement)


class Deadline:
    """A SQLite connection's time limit on its running statement: SQLite has no statement timeout of
    its own, so the connection's progress handler asks `passed` and interrupts the statement."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.at = math.inf

    def start(self):
        """A statement starts now: it may run for `seconds`."""
        self.at = time.monotonic() + self.seconds

    def passed(self):
        return time.monotonic() > self.at


# --- prepared statements: the hottest reads, straight on a pooled DBAPI connection


@dataclass
class Prepared:
    """A SELECT compiled once for the engine's dialect, for the reads every request repeats (a
    table read's plan, the bearer token's session and user). SQLAlchemy's per-execution work (an
    execution context, a result object, events) costs several times the statement itself there.
    Values stay bound parameters, converted by the same bind and result processors SQLAlchemy
    uses."""

    sql: str
    positions: tuple | None  # parameter names in the order a positional paramstyle takes them
    binds: dict  # name of a parameter each execution passes -> its bind processor, or None
    constants: dict  # name of a parameter with a value of its own -> that value, processed
    types: tuple  # the result columns' types
    row: type | None  # the named tuple a row becomes; None: rows stay plain tuples
    results: dict = field(default_factory=dict)  # cursor.description's type codes -> processors


def prepare(statement, engine, named=True):
    """`statement` as a Prepared for `engine`, or None when its SQL depends on its values (an
    expanding IN list): such statements go through SQLAlchemy. Its parameters that were made
    `required` take each execution's values; any other keeps the value it was built with. Rows are
    named tuples of the columns' keys when `named`, else plain tuples."""
    dialect = engine.dialect
    compiled = statement.compile(dialect=dialect)
    if compiled.post_compile_params or compiled.literal_execute_params:
        return None
    binds, constants = {}, {}
    for bind, name in compiled.bind_names.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if bind.required:
            binds[name] = process
        else:
            value = bind.effective_value
            constants[name] = value if process is None else process(value)
    columns = list(statement.selected_columns)
    positions = tuple(compiled.positiontup) if compiled.positional else None
    row = namedtuple("Row", [column.key for column in columns], rename=True) if named else None
    types = tuple(column.type for column in columns)
    return Prepared(compiled.string, positions, binds, constants, types, row)


def run(engine, values, *statements):
    """The rows of each Prepared of `statements`, all with `values` (a dict holding every parameter
    they name), in one transaction on a pooled connection that goes back to the pool at once.
    Errors are SQLAlchemy's, as Connection.execute raises them: a lost connection is invalidated
    and raised as an OperationalError (the 503), a statement the database refused as its DBAPIError."""
    dialect = engine.dialect
    results = []
    connection = cursor = statement = parameters = None
    try:
        connection = engine.raw_connection()
        deadline = connection.info.get("deadline")
        cursor = connection.cursor()
        for statement in statements:
            parameters = bound_parameters(statement, values)
            if deadline is not None:
                deadline.start()
            cursor.execute(statement.sql, parameters)
            results.append(_rows(statement, cursor.fetchall(), cursor.description, dialect))
        cursor.close()
    except dialect.loaded_dbapi.Error as exc:
        lost = connection is not None and dialect.is_disconnect(exc, connection.dbapi_connection, cursor)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            getattr(statement, "sql", None), parameters, exc, dialect.loaded_dbapi.Error,
            hide_parameters=engine.hide_parameters, connection_invalidated=lost, dialect=dialect,
        ) from exc  # fmt: skip
    finally:
        if connection is not None:
            connection.close()  # back to the pool, rolled back
    return results


def bound_parameters(statement, values):
    """What the DBAPI takes for `statement`: its parameters' values through their bind processors,
    as a dict or, for a positional paramstyle, a tuple. A value missing is a KeyError: a bug."""
    processed = {
        name: values[name] if process is None else process(values[name])
        for name, process in statement.binds.items()
    }
    processed.update(statement.constants)
    return (
        processed if statement.positions is None else tuple([processed[name] for name in statement.positions])
    )


def _rows(statement, found, description, dialect):
    processors = _result_processors(statement, description, dialect)
    if any(processors):
        found = [
            tuple(
                [
                    value if process is None else process(value)
                    for process, value in zip(processors, row, strict=True)
                ]
            )
            for row in found
        ]
    return found if statement.row is None else [statement.row._make(row) for row in found]


def _result_processors(prepared, description, dialect):
    """The result processors for a cursor's columns, worked out once per set of type codes."""
    codes = tuple(column[1] for column in description)
    processors = prepared.results.get(codes)
    if processors is None:
        processors = prepared.results[codes] = [
            kind.dialect_impl(dialect).result_processor(dialect, code)
            for kind, code in zip(prepared.types, codes, strict=True)
        ]
    return processors


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
