"""Statements compiled once and run straight on a DBAPI connection, without SQLAlchemy's
per-execution work (an execution context, a result object, events), which costs several times the
statement itself on the hottest paths. Values stay bound parameters, converted by the same bind
and result processors SQLAlchemy uses; errors come out as SQLAlchemy's.

- `prepared(values, *statements)`: reads compiled once (`prepare`) and run on a pooled DBAPI
  connection (a table read's plan, the bearer token's session and user). On MySQL they run on the
  reads engine, each statement in autocommit (database.connections).
- `execute(statement, values, alone=False)`: a write compiled once (`prepare`: the table API's
  INSERT of a row), run on the session's connection inside the unit of work
  (database.transactions). On MySQL, the one statement of a unit (`alone`) runs in autocommit
  instead: one round trip, no COMMIT."""

import contextlib
import os
from collections import namedtuple
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

import metrics
from database import failures, transactions
from extensions import db, state

# A span around a statement run straight on a DBAPI connection (SQL, database name) -> a context
# manager: set by runtime.traces when tracing is on; None costs nothing.
statement_spans = None
# In a pooled connection's info: a write committed on it since its checkout (a statement run alone,
# in autocommit, here; a transaction's COMMIT, by the listener of the engine's commits). Read when it
# goes back to the pool by whoever listens (Realtime's change feed reads the log at once).
COMMITTED = "minibase_committed"


def prepared(values, *statements):
    """The rows of each compiled statement of `statements`, with `values`, on one connection:
    the reads engine's, in autocommit mode (database.connections), or db.engine's on an in-memory
    SQLite database. On a SQLite file each server thread keeps a connection of its own (`own`);
    on MySQL the connection is pooled and goes back at once, and a read is tried again on a lost
    connection."""
    cache = state()
    engine = cache.reads or db.engine
    for attempt in range(1, transactions.ATTEMPTS + 1):
        try:
            return run_prepared(engine, values, *statements, own=cache.own)
        except DBAPIError as exc:
            failures.counted(exc)
            if (
                attempt == transactions.ATTEMPTS
                or not failures.retryable(exc)
                or not transactions.paused_for_another_attempt(attempt)
            ):
                raise
            metrics.DB_RETRIES.inc()
    raise AssertionError("unreachable")


def execute(statement, values, alone=False):
    """Run a Prepared write (an INSERT) with `values`; the cursor's lastrowid. `alone` says nothing
    follows it in the unit of work: on MySQL, when it also comes first (the unit has not begun a
    transaction) in a unit that commits, with nothing to run alongside, it runs in autocommit on a
    connection of the reads engine, its own transaction, without a COMMIT's round trip nor the
    session's work. A connection lost while it runs is then not tried again: it may have committed.
    Anything else runs on the session's connection, inside the unit's transaction."""
    if alone and transactions.may_run_alone():
        reads = state().reads
        if reads is not None and reads.dialect.name == "mysql":
            return _execute_alone(reads, statement, values)
    return _execute(statement, values)


def _execute_alone(engine, statement, values):
    dialect = engine.dialect
    parameters = bound_parameters(statement, values)
    connection = cursor = None
    try:
        connection = engine.raw_connection()
        cursor = connection.cursor()
        transactions.commits_by_itself()
        _run_statement(cursor, statement.sql, parameters, dialect)
        connection.info[COMMITTED] = True
        return cursor.lastrowid
    except dialect.loaded_dbapi.Error as exc:
        lost = connection is not None and dialect.is_disconnect(exc, connection.dbapi_connection, cursor)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement.sql, parameters, exc, dialect.loaded_dbapi.Error,
            hide_parameters=engine.hide_parameters, connection_invalidated=lost, dialect=dialect,
        ) from exc  # fmt: skip
    finally:
        if cursor is not None:
            with contextlib.suppress(dialect.loaded_dbapi.Error):
                cursor.close()
        if connection is not None:
            connection.close()  # back to the pool: nothing to roll back (autocommit)


def _run_statement(cursor, sql, parameters, dialect):
    if statement_spans is None:
        return cursor.execute(sql, parameters)
    with statement_spans(sql, dialect.name):
        return cursor.execute(sql, parameters)


def _execute(statement, values):
    """`statement` on the session's connection, inside the unit of work's transaction, as
    session.execute would, without its per-execution work. Errors are SQLAlchemy's: a lost
    connection is invalidated (the unit may then be tried again), a statement the database refused
    raised as its DBAPIError."""
    connection = db.session.connection()
    dialect, pooled = connection.dialect, connection.connection
    parameters = bound_parameters(statement, values)
    cursor = None
    try:
        cursor = pooled.cursor()
        deadline = pooled.info.get("deadline")
        if deadline is not None:
            deadline.start()
        _run_statement(cursor, statement.sql, parameters, dialect)
        return cursor.lastrowid
    except dialect.loaded_dbapi.Error as exc:
        lost = dialect.is_disconnect(exc, pooled.dbapi_connection, cursor)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement.sql, parameters, exc, dialect.loaded_dbapi.Error,
            hide_parameters=connection.engine.hide_parameters, connection_invalidated=lost, dialect=dialect,
        ) from exc  # fmt: skip
    finally:
        if cursor is not None:
            with contextlib.suppress(dialect.loaded_dbapi.Error):
                cursor.close()


@dataclass
class Prepared:
    """A SELECT compiled once for the engine's dialect; `prepare` makes one."""

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
    columns = list(getattr(statement, "selected_columns", ()))  # an INSERT selects none
    positions = tuple(compiled.positiontup) if compiled.positional else None
    row = namedtuple("Row", [column.key for column in columns], rename=True) if named else None
    types = tuple(column.type for column in columns)
    return Prepared(compiled.string, positions, binds, constants, types, row)


def run_prepared(engine, values, *statements, own=None):
    """The rows of each Prepared of `statements`, all with `values` (a dict holding every parameter
    they name), on a connection of `engine`: the calling thread's own when `own` (a threading.local)
    is given, else a pooled one that goes back to the pool at once. Errors are SQLAlchemy's, as
    Connection.execute raises them: a lost connection is invalidated and raised as an
    OperationalError (the 503), a statement the database refused as its DBAPIError."""
    dialect = engine.dialect
    results = []
    connection = cursor = statement = parameters = None
    try:
        connection = engine.raw_connection() if own is None else own_connection(engine, own)
        deadline = connection.info.get("deadline")
        cursor = connection.cursor()
        for statement in statements:
            parameters = bound_parameters(statement, values)
            if deadline is not None:
                deadline.start()
            _run_statement(cursor, statement.sql, parameters, dialect)
            results.append(_rows(statement, cursor.fetchall(), cursor.description, dialect))
        cursor.close()
    except dialect.loaded_dbapi.Error as exc:
        lost = connection is not None and dialect.is_disconnect(exc, connection.dbapi_connection, cursor)
        if lost:
            connection.invalidate(exc)
            if own is not None:
                own.connection = None
        raise DBAPIError.instance(
            getattr(statement, "sql", None), parameters, exc, dialect.loaded_dbapi.Error,
            hide_parameters=engine.hide_parameters, connection_invalidated=lost, dialect=dialect,
        ) from exc  # fmt: skip
    finally:
        if own is None and connection is not None:
            connection.close()  # back to the pool: rolled back, or nothing to roll back (autocommit)
        elif cursor is not None:  # a statement left open would hold a snapshot on a kept connection
            with contextlib.suppress(dialect.loaded_dbapi.Error):
                cursor.close()
    return results


def own_connection(engine, own):
    """The calling thread's connection of `engine`, made at its first read and kept: one of the
    pool's, detached from it, so that it counts against no pool size and a read takes no pool
    lock. A process forked after it was made makes its own."""
    connection = getattr(own, "connection", None)
    if connection is None or own.pid != os.getpid():
        connection = engine.raw_connection()
        connection.detach()
        own.connection, own.pid = connection, os.getpid()
    return connection


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


# MySQL's FLOAT and DOUBLE type codes: PyMySQL reads them as floats already.
FLOAT_CODES = frozenset({4, 5})


def _result_processors(prepared, description, dialect):
    """The result processors for a cursor's columns, worked out once per set of type codes. A Float
    column's (float() of each value) is left out where the driver hands floats already: without a
    processor left, rows are not rebuilt one by one."""
    codes = tuple(column[1] for column in description)
    processors = prepared.results.get(codes)
    if processors is None:
        processors = prepared.results[codes] = [
            None
            if dialect.driver == "pymysql" and code in FLOAT_CODES and _is_float(kind)
            else kind.dialect_impl(dialect).result_processor(dialect, code)
            for kind, code in zip(prepared.types, codes, strict=True)
        ]
    return processors


def _is_float(kind):
    return isinstance(kind, sa.Float) and not kind.asdecimal
