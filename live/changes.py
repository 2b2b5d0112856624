"""Postgres changes: the subscriptions a join may hold, and the feed that reads the change log the
triggers write (live/capture.py, read by live/changelog.py) and delivers each change once, in the
order they commit, to the subscribers whose filter matches and who may select that row now
(live/delivery.py)."""

import asyncio
import itertools
import logging
import os
import re
import sqlite3
import time
from dataclasses import dataclass

import sqlalchemy as sa

from database import statements
from extensions import db, state
from live import capture, changelog, delivery
from rest import policies, reflection

log = logging.getLogger("minibase")
_ids = itertools.count(1)

EVENTS = ("*", "INSERT", "UPDATE", "DELETE")
OPERATORS = ("eq", "neq", "lt", "lte", "gt", "gte", "in")
FILTER = re.compile(r"([^=]+)=(eq|neq|lt|lte|gt|gte|in)\.(.*)", re.S)
POLL_SECONDS = 0.02  # between two reads of the log while someone subscribes (and no commit of ours)
IDLE_SECONDS = 0.5  # between two reads while no one does
LOOK_SECONDS = 0.005  # SQLite: between two looks at whether anything was committed (Watch)
WATCHED_SECONDS = 0.2  # SQLite: between two reads of the log when nothing seems committed
RENEWAL_SECONDS = 1.0  # the longest changes just read wait for a channel's new token to be verified
JUDGE_RETRY_SECONDS = 60  # how long changes whose judging fails are judged again as a batch
TRIM_SECONDS = 10  # between two trims


class Refused(Exception):
    """A postgres_changes subscription the join's reply refuses, in Supabase's words."""


def unable(params):
    return (
        "RealtimeDisabledForConfiguration: Unable to subscribe to changes with given parameters. Please "
        "check Realtime is enabled for the given connect parameters: [event: {}, schema: {}, table: {}, "
        "filters: {}]".format(
            params.get("event", "*"),
            params.get("schema", "public"),
            params.get("table", "*"),
            params.get("filter", ""),
        )
    )


@dataclass
class Subscription:
    """One entry of a join's postgres_changes: which event of which table (None: every opted-in
    table), and a filter on one column."""

    id: int
    event: str
    schema: str
    table: str | None
    filter: str | None
    column: str | None = None
    operator: str | None = None
    values: tuple = ()

    def describe(self):
        """What the join's reply says of it: realtime-js matches it with its own binding."""
        found = {"id": self.id, "event": self.event, "schema": self.schema}
        if self.table is not None:
            found["table"] = self.table
        if self.filter is not None:
            found["filter"] = self.filter
        return found

    def matches(self, table, operation, row):
        if self.table is not None and self.table != table:
            return False
        if self.event != "*" and self.event.upper() != operation:
            return False
        return self.column is None or _compare(row.get(self.column), self.operator, self.values)


def _compare(value, operator, values):
    """A filter on the row's value: the filter's text read as the value's own type."""
    wanted = [_as(value, text) for text in values]
    if operator == "in":
        return value in wanted
    target = wanted[0]
    if operator == "eq":
        return value == target
    if operator == "neq":
        return value != target
    if value is None or target is None:
        return False
    try:
        return {"lt": value < target, "lte": value <= target, "gt": value > target, "gte": value >= target}[
            operator
        ]
    except TypeError:
        return False


def _as(value, text):
    if text == "null":
        return None
    if isinstance(value, bool):
        return text.lower() in ("true", "t", "1")
    if isinstance(value, int | float):
        try:
            return int(text) if isinstance(value, int) and re.fullmatch(r"-?\d+", text) else float(text)
        except ValueError:
            return text
    return text


def subscribe(wanted, who, captured):
    """The Subscriptions of a join's `postgres_changes`, each for a table whose changes are
    captured and that some token could read (_check_table); Refused otherwise. In the app's context."""
    if not isinstance(wanted, list):
        raise Refused(unable({}))
    found = []
    for params in wanted:
        if not isinstance(params, dict):
            raise Refused(unable({}))
        event, schema = params.get("event", "*"), params.get("schema", "public")
        table, text = params.get("table"), params.get("filter")
        if not isinstance(event, str) or event.upper() not in EVENTS or schema not in ("public", "*"):
            raise Refused(unable(params))
        if table is not None and not isinstance(table, str) or text is not None and not isinstance(text, str):
            raise Refused(unable(params))
        subscription = Subscription(
            next(_ids), event, schema, None if table in (None, "*") else table, text or None
        )
        if subscription.table is not None:
            _check_table(subscription.table, who, captured, params)
        elif not any(reason is None for reason in captured.values()):
            raise Refused(unable(params))
        if subscription.filter is not None:
            _parse_filter(subscription, params)
        found.append(subscription)
    return found


def _check_table(name, who, captured, params):
    """Refused: a table not opted in, not captured, or that no token could read (its select rule is
    service_role's). Any other is joined whatever `who` is: apps join before their session is back
    and send the user's token after, and each change is judged with the token held when it comes."""
    policy = policies.policies().get(name)
    if policy is None or not policy.realtime or captured.get(name, "") is not None:
        raise Refused(unable(params))
    if policy.rules["select"] == "service_role" and who.role != "service_role":
        raise Refused(unable(params))


def _parse_filter(subscription, params):
    match = FILTER.fullmatch(subscription.filter)
    if match is None or subscription.table is None:
        raise Refused(unable(params))
    column, operator, text = match.groups()
    table = reflection.reflected_or_none(subscription.table)
    if table is None or column not in table.c:  # a hidden column cannot be filtered on either
        raise Refused(unable(params))
    if operator == "in":
        if not (text.startswith("(") and text.endswith(")")):
            raise Refused(unable(params))
        values = tuple(part.strip().strip('"') for part in text[1:-1].split(","))
    else:
        values = (text,)
    subscription.column, subscription.operator, subscription.values = column, operator, values


# --- the feed


class Feed:
    """Reads the change log of this instance's database and hands each change to the channels of
    this process that subscribe to it. Every instance reads the whole log, so each delivers to its
    own sockets and none twice."""

    def __init__(self, server):
        self.server = server
        self.channels = set()  # channels holding subscriptions
        self.captured = {}  # table -> None (captured) or why not
        self.reader = changelog.Reader()
        self.task = None
        self.trimmed = 0.0
        self.wake = asyncio.Event()  # a first subscriber ends the idle wait at once
        self.watch = None  # SQLite: Watch, which tells at once that something was committed
        self.renewing = set()  # channels whose new access token is being verified (sessions.Socket)
        self.pending = []  # changes read but not yet judged (the judging failed)
        self.failing_since = None  # when the judging of self.pending first failed
        self.engines = ()  # the app's engines, whose commits wake the feed (woken_by_commits)

    async def start(self):
        """Install the triggers and start reading; with the database down or refusing, Realtime
        serves all the same and subscriptions to changes are refused (the log says why)."""
        try:
            self.captured = await self.server.call(capture.install)
            if not self.captured:
                return  # no table opts in: nothing to read
            await self.server.call(self.reader.start)
            self.watch = await self.server.call(Watch.of_database)
            self.engines = await self.server.call(lambda: (db.engine, state().reads))
            self.woken_by_commits(True)
        except Exception:
            log.exception("realtime: the change log cannot be read: no Postgres changes are served")
            self.captured = {}
            return
        self.task = asyncio.create_task(self.run())

    def woken_by_commits(self, on):
        """Read the log as soon as a connection of this process has committed (a write through
        /rest/v1 or the auth API), not at the next poll: the commit marks its connection, and its
        return to the pool, after the commit, wakes the feed, and through the bus (live.bus) the
        other instances' feeds. Other programs' writes are seen by the poll (SQLite: by Watch, at
        once)."""
        listen = sa.event.listen if on else sa.event.remove
        engine, reads = self.engines
        listen(engine, "commit", _committing)
        listen(engine.pool, "checkin", self._checked_in)
        if reads is not None:  # MySQL: a write that runs alone commits there, in autocommit
            listen(reads.pool, "checkin", self._checked_in)

    def _checked_in(self, dbapi_connection, record):
        if record is None or not record.info.pop(statements.COMMITTED, False):
            return
        if self.channels or self.server.hub.bus is not None:
            try:
                self.server.loop.call_soon_threadsafe(self.committed)
            except RuntimeError:  # the loop has closed: the service is stopping
                pass

    def committed(self):
        """This process committed: its feed reads the log now, and the other instances' feeds too."""
        self.told()
        if self.server.hub.bus is not None:
            self.server.hub.bus.committed()

    def told(self):
        """Something was committed (here, or on another instance: live.bus)."""
        if self.channels:
            self.wake.set()

    async def stop(self):
        if self.engines:
            self.woken_by_commits(False)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        if self.watch is not None:
            self.watch.connection.close()

    def add(self, channel):
        if channel.subscriptions:
            self.channels.add(channel)
            self.wake.set()

    def remove(self, channel):
        self.channels.discard(channel)

    async def run(self):
        while True:
            self.wake.clear()
            try:
                await self.step()
            except Exception:
                log.exception("realtime: reading the change log failed; trying again")
                await asyncio.sleep(1)
            if self.channels and self.watch is not None:
                await self.watched()
                continue
            try:
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS if self.channels else IDLE_SECONDS)
            except TimeoutError:
                pass

    async def watched(self):
        """Wait until SQLite says something was committed (looked at every LOOK_SECONDS, on the loop:
        a look costs microseconds, a read of the log a hop to a thread), or WATCHED_SECONDS pass."""
        deadline = time.monotonic() + WATCHED_SECONDS
        while not self.wake.is_set() and time.monotonic() < deadline:
            if self.watch.changed():
                return
            await asyncio.sleep(LOOK_SECONDS)

    async def step(self):
        if time.monotonic() - self.trimmed > TRIM_SECONDS:
            self.trimmed = time.monotonic()
            await self.server.call(changelog.trim)
        listening = {channel: channel.who for channel in self.channels if channel.authorized}
        changes, frames, dead = await self.server.call(self.judged, _listeners(listening))
        # A channel that joined, or whose new token was being verified, while the log was read is
        # judged (again) with what it holds now: the read may hold a change committed after its join
        # was answered, or after its token was sent.
        deadline = time.monotonic() + RENEWAL_SECONDS
        while changes and self.renewing and time.monotonic() < deadline:
            await asyncio.sleep(LOOK_SECONDS)
        again = {
            channel
            for channel in self.channels
            if channel.authorized and listening.get(channel, None) is not channel.who
        }
        if changes and again:
            try:
                more, more_dead = await self.server.call(delivery.judge, changes, _listeners(again))
                frames = [(channel, frame) for channel, frame in frames if channel not in again] + more
                dead = [(channel, why) for channel, why in dead if channel not in again] + more_dead
            except Exception:  # the others' frames still go out
                log.exception("realtime: changes could not be judged for channels that just joined")
        for channel, why in dead:
            self.server.lapse(channel, why)
        for channel, frame in frames:
            if channel.authorized and channel in self.channels:
                channel.connection.send_frame(frame)

    def judged(self, listeners):
        """(changes, frames, dead): the changes read from the log, judged for `listeners`
        (live.delivery), the read and the judging in one hop to a thread. In the app's context.

        The reader hands each change out once, so a change is kept until it has been judged: when
        the judging fails (the database down or frozen, a lock held past its timeout) the same
        changes are judged again at the next step, and no more are read meanwhile than one batch.
        Past JUDGE_RETRY_SECONDS of failures with the database answering, each change is judged
        alone and one that still fails (a row policy's SQL that errs on its row) is not delivered;
        the log names it."""
        if len(self.pending) < changelog.BATCH:
            self.pending += self.reader.read()
        changes = self.pending
        if not changes or not listeners:
            self.pending = []
            return changes, [], []
        try:
            frames, dead = delivery.judge(changes, listeners)
        except Exception:
            self.failing_since = self.failing_since or time.monotonic()
            if time.monotonic() - self.failing_since < JUDGE_RETRY_SECONDS:
                raise  # self.pending is judged again at the next step
            frames, dead = self._one_by_one(changes, listeners)
        self.pending, self.failing_since = [], None
        return changes, frames, dead

    def _one_by_one(self, changes, listeners):
        with db.engine.connect() as connection:  # a database that does not answer keeps them all
            connection.exec_driver_sql("SELECT 1")
        frames, dead = [], []
        for change in changes:
            try:
                more, more_dead = delivery.judge([change], listeners)
            except Exception:
                log.exception("realtime: change %s of table %r cannot be judged: not delivered", change.id,
                              change.table)  # fmt: skip
                continue
            frames, dead = frames + more, dead + more_dead
        return frames, dead


def _committing(connection):
    """A commit begins on `connection`: its return to the pool wakes the feed (Feed._checked_in)."""
    connection.info[statements.COMMITTED] = True


class Watch:
    """Whether any connection, of any process, committed to a SQLite database since the last look:
    PRAGMA data_version on a connection of its own, which SQLite changes on every commit of another
    connection. It takes no lock for long (timeout 0: a database busy in rollback-journal mode is
    taken for changed, and the log read)."""

    def __init__(self, path):
        self.connection = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
        self.version = None

    @classmethod
    def of_database(cls):
        """A Watch of the app's database when it is a SQLite file, else None. In the app's context."""
        url = db.engine.url
        if url.get_backend_name() != "sqlite" or not url.database or not os.path.isfile(url.database):
            return None
        return cls(url.database)

    def changed(self):
        try:
            version = self.connection.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return True
        changed, self.version = version != self.version, version
        return changed


def _listeners(channels):
    """What the judging in a thread needs of each channel, taken on the event loop."""
    return [
        delivery.Listener(channel, channel.subscriptions, channel.who, channel.token, channel.connection.vsn,
                          channel.topic, channel.join_ref)
        for channel in channels
    ]  # fmt: skip
