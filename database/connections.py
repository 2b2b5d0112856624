"""Bounded waits on the database: connect, read and lock timeouts (DB_TIMEOUT) and a time limit on
each statement (STATEMENT_TIMEOUT), set on every new connection, so that a database that stops,
freezes or drops the connection answers a JSON 503 in bounded time; on a Galera cluster node, reads
that see every write the cluster committed before them (causal reads). SQLite connections also get
the REGEXP function the match/imatch filters use.

The prepared reads (database.statements.prepared) have an engine of their own, whose
connections are in autocommit mode and are not reset when they go back to the pool. On MySQL a read
is then one round trip, the SELECT, where the shared pool's connections take two (the SELECT, a
ROLLBACK at checkin); each statement is its own transaction, which is what READ COMMITTED gave two
statements of one read already (a snapshot per statement), and an idle connection holds no
transaction, so no lock. A unit of work whose one statement is an INSERT runs it there too, its
own transaction (statements.execute). On SQLite nothing changes but the cost: sqlite3 opens no
transaction for a SELECT, so the rollback at checkin had nothing to undo. (An in-memory SQLite
database has no second engine: it would open another, empty, database.)

On MySQL a connection checked out of either engine is made again if the server closed it, seen
without a round trip, and pinged only if it sat unused for more than IDLE seconds; a read on a
connection that died anyway is tried again on a new one (statements.prepared), and a connection
lost marks every connection made before it, in both engines, as suspect: each is made again at its
next checkout, so a restarted server costs one retried read, not one per pooled connection."""

import math
import os
import threading
import time
import weakref

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import SingletonThreadPool, StaticPool

import metrics
from database import pymysql_seam
from extensions import db, state
from query import dialects


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
            dbapi_connection.create_function("regexp", 2, dialects.sqlite_regexp, deterministic=True)
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
                cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
                if (cursor.fetchone() or ("", "OFF"))[1] == "ON":
                    # A Galera node applies what others committed a moment later: a read waits until
                    # this node has applied everything committed before it, so that a logout on one
                    # node is refused on the next request to any other.
                    cursor.execute("SET SESSION wsrep_sync_wait = 1")
            else:  # MySQL bounds SELECTs only; writes are bounded by the lock wait and DB_TIMEOUT
                cursor.execute(f"SET SESSION max_execution_time = {int(statement_timeout * 1000)}")
        cursor.close()

    counted = _counted_in_use if app.config["METRICS"] else (lambda engine: None)
    with app.app_context():
        event.listen(db.engine, "connect", on_connect)
        _bounded_by_the_request(db.engine)
        counted(db.engine)
        sqlite = db.engine.dialect.name == "sqlite"
        if sqlite:
            event.listen(db.engine, "before_cursor_execute", start_deadline)
        losses = [-math.inf]  # when a connection of either engine was last lost (time.monotonic())
        if not sqlite:
            _checked_at_checkout(db.engine, losses)
        if isinstance(db.engine.pool, StaticPool | SingletonThreadPool):
            return  # an in-memory SQLite database: another engine would open another database
        options = {**app.config["SQLALCHEMY_ENGINE_OPTIONS"],
                   "isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None}  # fmt: skip
        reads = sa.create_engine(db.engine.url, **options)
        event.listen(reads, "connect", on_connect)
        _bounded_by_the_request(reads)
        counted(reads)
        if not sqlite:
            _checked_at_checkout(reads, losses)
        _disposed_with(reads, db.engine)
        state().reads = reads
        if sqlite:
            state().own = threading.local()


def _counted_in_use(engine):
    """The connections of `engine` checked out, in metrics.DB_CONNECTIONS_IN_USE."""
    event.listen(engine, "checkout", lambda *_: metrics.DB_CONNECTIONS_IN_USE.inc())
    event.listen(engine, "checkin", lambda *_: metrics.DB_CONNECTIONS_IN_USE.dec())


def _bounded_by_the_request(engine):
    if engine.dialect.driver == "pymysql":
        event.listen(
            engine,
            "do_connect",
            lambda dialect, record, args, kwargs: pymysql_seam.BoundedConnection(*args, **kwargs),
        )


# Seconds a pooled MySQL connection may have sat unused and still be handed out without a PING.
IDLE = 1.0


def _checked_at_checkout(engine, losses):
    """What a connection of `engine` goes through when it is checked out, without a round trip on a
    busy server: made again if it was made before a connection of either engine was lost (`losses`,
    the time of the last loss: a restarted server costs one lost statement, not one per pooled
    connection), or if the server closed it (a restart, KILL, its idle timeout: what the server
    sends then is already in the socket); pinged if it sat in the pool for more than IDLE seconds (a
    network that dropped it silently). A connection that dies past these checks fails its first
    statement, and the unit of work runs again on a new one (database.transactions)."""
    dialect = engine.dialect
    dbapi_error = dialect.loaded_dbapi.Error

    @event.listens_for(engine, "connect")
    def made(dbapi_connection, record):
        record.info["made_at"] = time.monotonic()

    @event.listens_for(engine, "invalidate")
    def lost(dbapi_connection, record, exception):
        if isinstance(exception, dbapi_error):  # not the DisconnectionErrors below: no cascade
            losses[0] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def idling(dbapi_connection, record):
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checked(dbapi_connection, record, proxy):
        info = record.info
        if info.get("made_at", -math.inf) <= losses[0]:
            raise sa.exc.DisconnectionError("made before a connection was lost")
        if pymysql_seam.closed_by_the_server(dbapi_connection):
            raise sa.exc.DisconnectionError("closed by the server")
        if time.monotonic() - info.get("idle_since", math.inf) <= IDLE:
            return  # used a moment ago, or never checked in: made just now
        try:
            dbapi_connection.ping(reconnect=False)
        except dbapi_error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                losses[0] = time.monotonic()
                raise sa.exc.DisconnectionError("lost while idle") from exc
            raise


def _disposed_with(engine, main):
    """`engine`'s pool is disposed of with `main`'s. In a forked worker (another process than the
    one that made it) its connections are left to that process, as the worker does with main's."""
    made_by = os.getpid()
    engine = weakref.ref(engine)

    @event.listens_for(main, "engine_disposed")
    def disposed(_main):
        if (reads := engine()) is not None:
            reads.dispose(close=os.getpid() == made_by)


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
