"""Requests take turns at the interpreter: one request thread of a process runs at a time, the
others wait for their turn in the order they came, and one that waits on something outside the
process (bcrypt, the network, a sleep) gives its turn to the next while it does.

Why: Python runs one thread at a time, and SQLite's module lets go of the interpreter for every
step of a statement, a step a row. With several request threads runnable, each step hands the
interpreter to another thread and back, two context switches a row: measured with 16 clients on 2
cores, a read of 50 rows with two embeds spent as much time in the kernel (futex) as in Python,
and served 690–725 requests a second; in turns, 1,090–1,125. A thread that waits for its turn
waits on a lock of its own, not on the interpreter, so the thread that runs steps through its rows
alone.

A turn is not waited for without end: after PATIENCE seconds the request runs beside the one that
holds it, as every request did before turns, and one that finds the turn held longer than that
does not wait at all. So a holder stuck on something no give-up covers (a database lock another
process holds, a long export) costs the requests that came in its first PATIENCE seconds that wait,
and the later ones nothing.

`gated` wraps the app's call in both servers when the database is SQLite (runtime.server.in_turns:
on MySQL requests wait on the server, and run as before); `waiting()` wraps each wait, wherever it
is, and does nothing on a thread that holds no turn: MySQL's, the background threads, the command
line, tests calling the app directly."""

import threading
import time
from collections import deque
from contextlib import contextmanager

import metrics

PATIENCE = 0.05  # seconds a request waits for its turn before it runs anyway

_local = threading.local()


class Turns:
    """The turn: a lock handed to its waiters in the order they came. One that lets go gives it
    straight to the first waiter, so a thread that lets go and asks again at once (a pool thread
    taking its next request) cannot take it ahead of those waiting, as it can with
    threading.Semaphore, whose waiters then waited out their patience. A turn already held for
    longer than a taker's patience is not waited for at all: while one request stays stuck in its
    turn, only those that came in its first `patience` seconds wait."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._held = False
        self._since = 0.0  # when the holder took it, or was handed it
        self._waiting = deque()  # a held lock per waiter, released to hand it the turn
        self.waited_out = 0  # takes that ran out of patience, or found the holder stuck past it

    def take(self, patience):
        """True once the turn is this thread's; False after `patience` seconds without it."""
        with self._mutex:
            if not self._held:  # then none waits either: a turn let go goes to the first waiter
                self._held, self._since = True, time.monotonic()
                return True
            if time.monotonic() - self._since >= patience:
                self._waited_out()
                return False
            handed = threading.Lock()
            handed.acquire()
            self._waiting.append(handed)
        if handed.acquire(timeout=patience):
            return True
        with self._mutex:
            if handed in self._waiting:
                self._waiting.remove(handed)
                self._waited_out()
                return False
        handed.acquire()  # handed over as the wait ran out: released already, so no wait
        return True

    def give(self):
        with self._mutex:
            if self._waiting:
                self._since = time.monotonic()
                self._waiting.popleft().release()
            else:
                self._held = False

    def _waited_out(self):
        self.waited_out += 1
        metrics.TURNS_WAITED_OUT.inc()


TURNS = Turns()


def held():
    return getattr(_local, "held", False)


@contextmanager
def turn(turns=TURNS):
    """Run the block in this thread's turn (taken here, or already held: a call within a call)."""
    if held():
        yield
        return
    _local.held = turns.take(PATIENCE)
    _local.turns = turns
    try:
        yield
    finally:
        if _local.held:
            turns.give()
        _local.held = False


@contextmanager
def waiting():
    """Give this thread's turn to the next while the block waits; take one again after it."""
    if not held():
        yield
        return
    turns = _local.turns
    turns.give()
    _local.held = False
    try:
        yield
    finally:
        _local.held = turns.take(PATIENCE)


def gated(app):
    """The WSGI `app` called in a turn. What its answer's iterable still runs is not in it: the
    server reads that after the call, and may block on a slow client while it does."""

    def in_turn(environ, start_response):
        with turn():
            return app(environ, start_response)

    return in_turn
