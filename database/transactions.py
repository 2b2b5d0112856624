"""The one way minibase runs a transaction, on every API: begin, commit or roll back, and try the
whole unit of work again when the database refused it only because of another transaction.

- `write(work, *args)`: `work` runs on the request's session and is committed when it returns,
  rolled back when it raises. Nothing below it commits.
- `read(work, *args, read_only=False)`: the same, always rolled back; `read_only` makes the
  database refuse any change (SQLite's query_only, MySQL's READ ONLY transaction).
- `end_session()`: the end of every request's session, a read's included.

A unit is tried again, from its first statement, after a deadlock or a lock wait that timed out
(MySQL 1213, 1205; on a Galera cluster a write that lost certification at COMMIT is reported as
1213 too) and after a connection lost before COMMIT was sent. A connection lost during COMMIT, or
during a statement that commits by itself (statements.execute, alone), is never retried: the commit may
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
import random
import time

from sqlalchemy.exc import DBAPIError

import metrics
import turns
from database.failures import counted, describe, retryable
from extensions import db

log = logging.getLogger("minibase")


# Writers of one row spread over three Galera nodes are refused again and again while the row stays
# hot: twelve at once needed up to 5 attempts; sixteen that never stop, more than 5 for 1 request in
# 80 and more than 10 for 1 in 300. Ten attempts, the pauses growing to at most MAX_PAUSE, spend at
# most ~1.3 s pausing in all.
ATTEMPTS = 10


FIRST_PAUSE = 0.01  # seconds; doubled after each attempt (up to MAX_PAUSE), drawn at random up to that


MAX_PAUSE = 0.25


_inside = contextvars.ContextVar("minibase_transaction", default=False)


_alongside = contextvars.ContextVar("minibase_alongside", default=None)


_deadline = contextvars.ContextVar("minibase_database_deadline", default=None)  # time.monotonic()


_bound = contextvars.ContextVar("minibase_database_bound", default=None)  # seconds bound_waits gave


# Whether the running attempt sent a statement that commits by itself (`execute`, alone).
_committing_alone = contextvars.ContextVar("minibase_committing_alone", default=False)


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
    with turns.waiting():
        time.sleep(wait)
    return True


class CommitAndRaise(Exception):  # noqa: N818 (a signal to the helper, not an error of its own)
    """Raised by a unit of work to commit what it wrote, then answer `error`."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


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


def may_run_alone():
    """Whether the running unit's statement may run in autocommit, as a transaction of its own
    (statements.execute, alone): the unit commits, has begun no transaction yet, and has nothing to
    run alongside."""
    return _inside.get() == COMMITS and _alongside.get() is None and not _in_transaction()


def commits_by_itself():
    """The running attempt sent a statement that commits by itself: a connection lost now is not
    tried again, for the commit may have happened."""
    _committing_alone.set(True)


def on_connection(connection, work, *args):
    """`work(connection, *args)` as one transaction on `connection`, a connection of the caller's own
    outside any request (the migration lock's, whose lease must be committed while a migration runs
    on another; a restore's, a DBAPI connection of its own): committed when it returns, rolled back
    when it raises; its result. Tried once: the caller decides what a conflict means (waiting for a
    lease is no retry of a unit of work)."""
    try:
        result = work(connection, *args)
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    return result


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
