"""The one way minibase runs a transaction, on every API: begin, commit or roll back, and try the
whole unit of work again when the database refused it only because of another transaction.

- `write(work, *args)`: `work` runs on the request's session and is committed when it returns,
  rolled back when it raises. Nothing below it commits.
- `read(work, *args, read_only=False)`: the same, always rolled back; `read_only` makes the
  database refuse any change (SQLite's query_only, MySQL's READ ONLY transaction).
- `prepared(values, *statements)`: reads compiled once (`prepare`) and run straight on a pooled
  DBAPI connection, the hottest path (a table read's plan, the bearer token's session and user):
  SQLAlchemy's per-execution work (an execution context, a result object, events) costs several
  times the statement itself there. Values stay bound parameters, converted by the same bind and
  result processors SQLAlchemy uses; errors come out as SQLAlchemy's. On MySQL they run on the
  reads engine, each statement in autocommit (database.connections).
- `execute(statement, values, alone=False)`: a write compiled once (`prepare`: the table API's
  INSERT of a row), run on the session's connection inside the unit of work, without SQLAlchemy's
  per-execution work; errors come out as SQLAlchemy's. On MySQL, the one statement of a unit
  (`alone`) runs in autocommit instead: one round trip, no COMMIT.
- `end_session()`: the end of every request's session, a read's included.

A unit is tried again, from its first statement, after a deadlock or a lock wait that timed out
(MySQL 1213, 1205; on a Galera cluster a write that lost certification at COMMIT is reported as
1213 too) and after a connection lost before COMMIT was sent. A connection lost during COMMIT, or
during a statement that commits by itself (`execute`, alone), is never retried: the commit may
have happened. Past ATTEMPTS the error goes on, a 503. Attempts are spaced by a random, growing
pause, so that writers who collided do not collide again in step.

A unit that starts inside another joins it: only the outermost commits. `CommitAndRaise` ends a
unit with an error after committing what it wrote (a counted failure, a revoked session).

A request's waits on the database end within DB_TIMEOUT in all (`bound_waits`, at its start): no
attempt is tried again once that time is spent, and every connect, read and write of an attempt
waits no longer than what is left of it (database.connections), so that a frozen database is a 503
within DB_TIMEOUT, not ATTEMPTS times that.

What calls another service (an auth hook, a mail server) is kept out of the unit's attempts, so
that no retry repeats it and no connection or lock waits on it: `ask(key, question)` asks before
the unit's writes (the attempt that needs the answer is rolled back, asks, and the unit runs again
with it), `after_commit(step)` calls once the unit has committed, and `undo_if_a_step_fails(undo)`
takes back what the unit wrote for a response that such a step then failed.

`alongside(extra)` adds `extra()` to the next unit that commits in its block: a record of a change
that a service makes in a unit of its own (an upload, whose bytes are placed around its commit)."""

import contextlib
import contextvars
import functools
import logging
import math
import os
import random
import time
from collections import namedtuple
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

import metrics
from extensions import db, state

log = logging.getLogger("minibase")

# Writers of one row spread over three Galera nodes are refused again and again while the row stays
# hot: twelve at once needed up to 5 attempts; sixteen that never stop, more than 5 for 1 request in
# 80 and more than 10 for 1 in 300. Ten attempts, the pauses growing to at most MAX_PAUSE, spend at
# most ~1.3 s pausing in all.
ATTEMPTS = 10
FIRST_PAUSE = 0.01  # seconds; doubled after each attempt (up to MAX_PAUSE), drawn at random up to that
MAX_PAUSE = 0.25
# MySQL/MariaDB: a lock wait timed out; a deadlock (or a Galera certification failure); a SAVEPOINT
# that no longer exists, because the server rolled the whole transaction back under it (a deadlock
# met inside the savepoint): each a conflict the database resolved by rolling back, never the query's.
RETRYABLE_CODES = frozenset({1205, 1213, 1305})

_inside = contextvars.ContextVar("minibase_transaction", default=False)
_alongside = contextvars.ContextVar("minibase_alongside", default=None)
_deadline = contextvars.ContextVar("minibase_database_deadline", default=None)  # time.monotonic()
_bound = contextvars.ContextVar("minibase_database_bound", default=None)  # seconds bound_waits gave
# Whether the running attempt sent a statement that commits by itself (`execute`, alone).
_committing_alone = contextvars.ContextVar("minibase_committing_alone", default=False)
# A span around a statement run straight on a DBAPI connection (SQL, database name) -> a context
# manager: set by runtime.traces when tracing is on; None costs nothing.
statement_spans = None
_after = contextvars.ContextVar("minibase_after_commit", default=None)  # the running attempt's After
_answers = contextvars.ContextVar("minibase_answers", default=None)  # what `ask` got, per outermost unit
COMMITS, ROLLS_BACK = "commits", "rolls back"  # what the running unit of work does at its end


def bound_waits(seconds):
    """From now on, this context's waits on the database (a request's) end within `seconds` in all."""
    _bound.set(seconds)
    _deadline.set(time.monotonic() + seconds)


def unbound_waits():
    """Each wait on the database is bounded on its own again (by DB_TIMEOUT), as outside requests."""
    _bound.set(None)
    _deadline.set(None)


def _bound_again():
    """The request's waits on the database bounded anew, after a wait on another service (a hook, a
    mail server) that is no wait on the database: what follows it gets its whole DB_TIMEOUT."""
    seconds = _bound.get()
    if seconds is not None:
        _deadline.set(time.monotonic() + seconds)


# The time.monotonic() at which the context's waits on the database must end, or None: unbounded.
deadline = _deadline.get


def time_left():
    """Seconds the context may still wait on the database, less than 0 once spent; None: unbounded."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def paused_for_another_attempt(attempt):
    """Wait before attempt `attempt + 1`; False, without waiting, when the time the context may wait
    on the database would be spent before that attempt could begin."""
    wait = pause(attempt)
    left = time_left()
    if left is not None and left <= wait:
        return False
    time.sleep(wait)
    return True


class CommitAndRaise(Exception):  # noqa: N818 (a signal to the helper, not an error of its own)
    """Raised by a unit of work to commit what it wrote, then answer `error`."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


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


def pause(attempt):
    """How long to wait before attempt `attempt + 1`: random, up to FIRST_PAUSE * 2**(attempt-1) or
    MAX_PAUSE."""
    return random.uniform(0, min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1)))


def write(work, *args, **kwargs):
    """`work(*args, **kwargs)` as one committed transaction; its result."""
    return _run(work, args, kwargs, commit=True, read_only=False)


def read(work, *args, read_only=False, **kwargs):
    """`work(*args, **kwargs)` as one transaction that is rolled back; its result."""
    return _run(work, args, kwargs, commit=False, read_only=read_only)


def transactional(work):
    """A function whose every call is one committed transaction (`write`)."""

    @functools.wraps(work)
    def wrapped(*args, **kwargs):
        return write(work, *args, **kwargs)

    return wrapped


def _run(work, args, kwargs, commit, read_only):
    if _inside.get():
        return work(*args, **kwargs)  # part of the unit already running: it commits or not
    token = _inside.set(COMMITS if commit else ROLLS_BACK)
    answers = _answers.set({})
    try:
        result, after = _attempts(work, args, kwargs, commit, read_only)
    finally:
        _inside.reset(token)
        _answers.reset(answers)
    if after is not None:
        after.run()
    return result


def _attempts(work, args, kwargs, commit, read_only):
    """(the unit's result, what runs after its commit: an After, or None), the unit tried again from
    its first statement while the database refuses it for a retryable reason."""
    attempt = 1
    while True:
        committing = False
        _committing_alone.set(False)
        after = After()
        token = _after.set(after)
        try:
            _roll_back()  # what the request read before is over: a fresh snapshot
            stop = None
            with _read_only(read_only):
                try:
                    result = work(*args, **kwargs)
                except CommitAndRaise as raised:
                    stop = raised
            pending = _alongside.get() if commit and stop is None else None
            for extra in pending or ():
                extra()
            committing = True
            # A commit refused (a Galera certification failure) tries the whole unit again, the
            # commit of a CommitAndRaise included: its counted failure must not be lost.
            if _in_transaction():
                db.session.commit() if commit or stop is not None else db.session.rollback()
            if pending:
                pending.clear()  # committed: the block's later units do not repeat it
            if stop is not None:
                raise stop.error from None
            return result, after if commit else None
        except _Ask as asked:
            _roll_back()  # its connection and locks go back before the question is asked
            _answers.get()[asked.key] = asked.question()
        except DBAPIError as exc:
            _roll_back()
            counted(exc)
            if (
                attempt == ATTEMPTS
                or not retryable(exc, committing or _committing_alone.get())
                or not paused_for_another_attempt(attempt)
            ):
                raise
            attempt += 1
            metrics.DB_RETRIES.inc()
            log.info("%s: %s, trying again (attempt %d)", work.__name__, describe(exc), attempt)
        except BaseException:
            _roll_back()
            raise
        finally:
            _after.reset(token)


class _Ask(BaseException):  # noqa: N818 (a signal to the helper; no `except Exception` may catch it)
    def __init__(self, key, question):
        super().__init__(key)
        self.key, self.question = key, question


def ask(key, question):
    """`question()`'s answer, for an answer from another service that the unit of work needs (an auth
    hook that may veto a sign-up), asked outside the unit: the attempt that first asks is rolled
    back, so that no pooled connection nor lock waits on the other service, `question()` is called
    with no transaction open, and the unit runs again from its first statement, where `ask(key, …)`
    now returns the answer at once, as it does in every later attempt. So the question is asked once
    per unit of work whatever its retries, under `key`. Outside a unit it is simply asked."""
    answers = _answers.get()
    if not _inside.get() or answers is None:
        return question()
    if key not in answers:
        raise _Ask(key, question)
    return answers[key]


class After:
    """What a unit of work leaves for after its commit: `steps` that call another service (an auth
    hook whose answer the response needs, a mail server), and `undos`, the unit's own writes taken
    back should one of those steps fail (the user made for a sign-up whose token the hook refused, a
    token whose mail could not be sent). Each undo is a unit of work of its own, the last made first."""

    def __init__(self):
        self.steps, self.undos = [], []

    def run(self):
        try:
            for step in self.steps:
                step()
        except BaseException:
            _bound_again()
            for undo in reversed(self.undos):
                try:
                    write(undo)
                except DBAPIError as exc:  # the step's own error is the answer; this one is logged
                    log.error("undoing %s after a failed step: %s", undo.__name__, describe(exc))
            raise


def after_other_service():
    """Call after waiting on another service within a step (after_commit): the database work that
    follows it has its whole DB_TIMEOUT, not what the other service left of it."""
    _bound_again()


def after_commit(step):
    """`step()` runs once the running unit of work has committed, outside it: no connection held, no
    lock, no retry repeats it (an attempt rolled back drops its steps), and it may run units of its
    own. A unit that ends in an error (CommitAndRaise) runs none. Outside a unit, it runs now."""
    after = _after.get()
    if after is None or not _inside.get():
        step()
    else:
        after.steps.append(step)


def undo_if_a_step_fails(undo):
    """`undo()` runs, as a unit of work of its own, if a step after the running unit's commit fails
    (after_commit): it takes back what the unit wrote for a response that will not be given."""
    after = _after.get()
    if after is not None and _inside.get():
        after.undos.append(undo)


def _in_transaction():
    """Whether the request's session has a transaction open; a unit that never used the session (a
    write that ran alone, in autocommit) makes none only to ask."""
    return db.session.registry.has() and db.session().in_transaction()


def _roll_back():
    if db.session.registry.has():
        db.session.rollback()


@contextlib.contextmanager
def alongside(extra):
    """In this block, `extra()` runs inside the first unit of work that commits (a write that
    succeeds), just before its commit, and in each attempt of it: it commits with that unit or not
    at all. None commits in the block: it never runs."""
    token = _alongside.set([extra])
    try:
        yield
    finally:
        _alongside.reset(token)


class _read_only:
    """While open, the session's transaction may not change data."""

    def __init__(self, enabled):
        self.sqlite = None
        self.enabled = enabled

    def __enter__(self):
        if not self.enabled:
            return self
        connection = db.session.connection()
        if connection.dialect.name == "sqlite":
            self.sqlite = connection.connection.dbapi_connection
            self.sqlite.execute("PRAGMA query_only = ON")
        else:
            connection.exec_driver_sql("SET TRANSACTION READ ONLY")
        return self

    def __exit__(self, *exc):
        if self.sqlite is not None:  # before the rollback hands the connection back to the pool
            self.sqlite.execute("PRAGMA query_only = OFF")
        return False


def prepared(values, *statements):
    """The rows of each compiled statement of `statements`, with `values`, on one connection:
    the reads engine's, in autocommit mode (database.connections), or db.engine's on an in-memory
    SQLite database. On a SQLite file each server thread keeps a connection of its own (`own`);
    on MySQL the connection is pooled and goes back at once, and a read is tried again on a lost
    connection."""
    cache = state()
    engine = cache.reads or db.engine
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return run_prepared(engine, values, *statements, own=cache.own)
        except DBAPIError as exc:
            counted(exc)
            if attempt == ATTEMPTS or not retryable(exc) or not paused_for_another_attempt(attempt):
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
    if alone and _inside.get() == COMMITS and _alongside.get() is None and not _in_transaction():
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
        _committing_alone.set(True)
        _run_statement(cursor, statement.sql, parameters, dialect)
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


def end_session():
    """End the request's transaction, a read's included, and return its connection to the pool. A
    DBAPIError here means the connection died: it is invalidated (never handed out again) and the
    error goes on."""
    if not db.session.registry.has():
        return  # the request never used the database: no session to make only to close it
    try:
        db.session.close()
    except Exception:
        db.session().invalidate()
        raise


# --- compiled reads, and SQLite's statement deadline


def start_deadline(conn, cursor, statement, parameters, context, executemany):
    """before_cursor_execute on SQLite: the statement about to run gets STATEMENT_TIMEOUT."""
    deadline = conn.connection._connection_record.info.get("deadline")
    if deadline is not None:
        deadline.start()


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
