"""Several processes serving one port (WORKERS > 1), so the service uses more than one core.

The parent binds the listening socket once and forks the workers; every worker is a server
(waitress, server.py, or uvicorn, asgi.py) with THREADS threads accepting on that shared socket.
Left to the kernel, the worker that wakes first takes every new connection, and a client that
keeps its connections open (a proxy's keep-alive pool, a load test) would be served by one worker
alone: so each worker publishes how many connections it holds (Balance), and only the ones that
hold fewest, give or take one, accept. The app was created, and its migrations run, before the
fork; a worker drops the database connections it inherited (without closing them: they
are the parent's) and opens its own, and starts a log writer of its own on the same stderr.

SIGTERM or SIGINT to the parent: it closes its copy of the listener and passes SIGTERM on; each
worker drains as a single process does (no new connections, the requests in flight finish, up to
DRAIN_SECONDS) and exits 0; then the parent exits 0. A worker that dies otherwise is replaced.
A worker whose parent is gone drains and exits rather than serve on alone.
"""

import functools
import logging
import mmap
import os
import signal
import socket
import threading
import time

import metrics
from auth import outbox
from extensions import db
from live import bus
from runtime import logs, server
from webhooks import worker

log = logging.getLogger("minibase")

BACKLOG = 1024  # connections the kernel queues before a worker accepts them (waitress's default)
RESPAWN_PAUSE = 1.0  # seconds between replacements of a worker that dies as soon as it starts
LOOK_SECONDS = 0.2  # how often the parent looks for a worker that exited
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
STALE_SECONDS = 2.0  # a worker that has not published for this long is not waited for (a loop
# looks at least every server.POLL_SECONDS)


def listen(host, port):
    """The listening socket the workers share."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(address)
    sock.listen(BACKLOG)
    return sock


class Balance:
    """How many connections each worker holds, in memory the forked workers share: a worker
    accepts only while it holds no more than one more than the fewest a live worker holds."""

    def __init__(self, count):
        self.count = count
        self.shared = memoryview(mmap.mmap(-1, 16 * count)).cast("d")  # (connections, when) a slot

    def clear(self, slot):
        self.shared[2 * slot] = self.shared[2 * slot + 1] = 0.0

    def may_accept(self, slot, connections):
        now = time.monotonic()
        self.shared[2 * slot], self.shared[2 * slot + 1] = connections, now
        fewest = min(
            self.shared[2 * n]
            for n in range(self.count)
            if n == slot or now - self.shared[2 * n + 1] < STALE_SECONDS
        )
        return connections <= fewest + 1

    def guard(self, running, slot):
        """Make the waitress server `running` accept only when `may_accept` says so."""
        readable = running.readable  # waitress's own: its upkeep, and the connection limit

        def balanced():  # a server resting from a failed accept publishes nothing until accept works
            return readable() and (running.resting or self.may_accept(slot, len(running.active_channels)))

        running.readable = balanced


class _Stop(threading.Event):
    """A worker's stop flag: set by SIGTERM or SIGINT, and true as well once the parent is gone."""

    def __init__(self, parent):
        super().__init__()
        self.parent = parent

    def is_set(self):
        return super().is_set() or os.getppid() != self.parent


def _work(app, listener, threads, parent, balance, slot, sockets=False):
    """A worker's life, in the forked child; never returns."""
    status = 1
    try:
        stop = _Stop(parent)
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: stop.set())
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        writer = logs.log_in_batches(app.config["LOG_FORMAT"])
        try:
            with app.app_context():
                db.engine.dispose(close=False)  # the parent's connections stay the parent's
            outbox.start_sender(app)  # the mail a process that died left unsent
            background = worker.Background(app).start()  # webhooks and schedules, claimed in the database
            try:
                if sockets:
                    _serve_sockets(app, listener, threads, stop, functools.partial(balance.may_accept, slot))
                else:
                    running = server.make_server(app, None, None, threads, sockets=[listener])
                    balance.guard(running, slot)
                    server.serve(running, stop)
            finally:
                background.stop()
            status = 0
        except Exception:
            log.exception("worker %s failed", os.getpid())
        finally:
            writer.stop()
    finally:
        os._exit(status)  # not the parent's exit: none of its finally blocks or atexit hooks


def _serve_sockets(app, listener, threads, stop, share):
    """A worker under uvicorn with Realtime (asgi.py), taking connections by the same balance."""
    from live.sessions import Realtime
    from runtime import asgi

    running = asgi.make_server(app, Realtime(app), None, None, threads, stop, sockets=[listener], share=share)
    asgi.serve(running)


class Supervisor:
    """The parent: forks `count` workers, replaces the ones that die, and drains them all."""

    def __init__(self, app, listener, threads, count, sockets=False):
        self.app, self.listener, self.threads, self.count = app, listener, threads, count
        self.sockets = sockets  # uvicorn with Realtime in each worker, not waitress
        self.workers = {}  # pid -> (its slot in the balance, when it started)
        self.balance = Balance(count)
        self.stop = threading.Event()
        self.failed = False

    def start_worker(self, slot):
        parent = os.getpid()
        self.balance.clear(slot)
        # A stop signal between the fork and the worker's own handlers would reach the parent's.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:
                _work(self.app, self.listener, self.threads, parent, self.balance, slot, self.sockets)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        self.workers[pid] = (slot, time.monotonic())
        log.info("worker %s started", pid)

    def reap(self, timeout=0.0):
        """Collect the workers that exited, waiting up to `timeout` for the first; their pids and
        exit statuses."""
        deadline = time.monotonic() + timeout
        exited = []
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if exited or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
                continue
            slot, started = self.workers.pop(pid, (None, None))
            metrics.process_exited(pid)
            if slot is not None:
                exited.append((pid, slot, status, time.monotonic() - started))
        return exited

    def run(self, drain_seconds=server.DRAIN_SECONDS):
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: self.stop.set())
        with self.app.app_context():
            db.engine.dispose()  # the parent serves nothing: no connection of its own to hand down
        for slot in range(self.count):
            self.start_worker(slot)
        while not self.stop.is_set():
            for pid, slot, status, lived in self.reap():
                log.warning("worker %s exited unexpectedly (%s): starting another", pid, _describe(status))
                if lived < RESPAWN_PAUSE:
                    self.stop.wait(RESPAWN_PAUSE)
                if not self.stop.is_set():
                    self.start_worker(slot)
            self.stop.wait(LOOK_SECONDS)
        return self.drain(drain_seconds)

    def drain(self, seconds):
        """Close the listener here and have every worker drain; 0 when every one exited 0."""
        log.info("stopping %s workers", len(self.workers))
        self.listener.close()
        for pid in self.workers:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + seconds + 5
        while self.workers and time.monotonic() < deadline:
            for pid, _, status, _ in self.reap(timeout=deadline - time.monotonic()):
                if os.waitstatus_to_exitcode(status) != 0:
                    log.warning("worker %s exited (%s)", pid, _describe(status))
                    self.failed = True
        for pid in self.workers:
            log.warning("worker %s did not stop: killed", pid)
            _signal(pid, signal.SIGKILL)
            self.failed = True
        self.reap(timeout=1)
        log.info("stopped")
        return 1 if self.failed else 0


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _describe(status):
    code = os.waitstatus_to_exitcode(status)
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


def serve(app, host, port, threads, count, sockets=False):
    """Serve `app` on host:port with `count` worker processes until SIGTERM or SIGINT; the exit
    status for the parent. `sockets`: each worker is uvicorn with Realtime (asgi.py)."""
    listener = listen(host, port)
    print(f"serving on http://{host}:{listener.getsockname()[1]} with {count} workers", flush=True)
    if sockets and bus.url_for(app.config) is None:
        log.warning(
            "realtime: WORKERS=%s and no Redis: a broadcast or a presence reaches only the sockets of "
            "its own worker; set REALTIME_REDIS_URL (docs/realtime.md)",
            count,
        )
    return Supervisor(app, listener, threads, count, sockets).run()
