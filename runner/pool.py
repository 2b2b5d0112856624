"""The worker processes, kept per function and version: a call takes an idle worker of its function
(or starts one), talks to it on its own thread, and gives it back, or kills it when it timed out,
died, failed or left threads or files behind. No thread of the pool's own stands between a request
and its worker: whatever a call waits for, it waits for on its own thread, bounded by its timeout.
The pool's one thread starts the successors of workers that have served their calls, beside them.

Calls at once are bounded per process (`limit`) and per function (its `concurrency`), so that
functions never hold every thread of the server: past either bound a call is refused at once.

Why not pebble or loky, both well kept: each runs a task to one pickled result, so a stream cannot
pass through, and unpickling what a worker sends lets the operator's code run in the service; each
keeps threads of its own (pebble three) that a request's future waits on; pebble forks the
service's process by default (its threads, its database connections) and loky starts slowly.
Measured in one process on the shared 2 cores at load average 21: a warm call of a trivial function
0.12 ms (pebble), 0.38 ms (loky), 0.21 ms (here); the first call 35 ms (pebble, by fork), 912 ms
(loky), 242 ms (here: a new interpreter that imports only runner.api and runner.wire)."""

import atexit
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import defaultdict

import turns
from runner import wire

log = logging.getLogger("minibase.functions")
IDLE_SECONDS = 300  # an idle worker older than this is let go at the next call
REAP_SECONDS = 5  # how long a killed worker is waited for
# Python's allocator keeps an arena per thread, each reserving 64 MB of address space: two keep a
# function's threads from using up its address-space limit without allocating anything.
WORKER_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


POOLS = weakref.WeakSet()  # every live Pool, whose idle workers end with the process (close_all)


@atexit.register
def close_all():
    for pool in list(POOLS):
        pool.close()


class Refused(Exception):
    """No room for the call: too many calls at once."""


class Worker:
    """One worker process and its socket. `key` says what it runs: (name, version, limits)."""

    def __init__(self, key, process, conn):
        self.key, self.process, self.conn = key, process, conn
        self.calls, self.used_at = 0, time.monotonic()
        self.succeeded = False  # its successor is ready (or failed to start): let go at its return

    @property
    def name(self):
        return self.key[0]

    def wait(self, seconds):
        """True when the worker said something (or its socket closed) within `seconds`."""
        return self.conn.poll(max(0.0, seconds))

    def ended(self):
        """How the process ended: its exit status, -signal, or None while it runs (waited for briefly,
        as its socket closes a moment before it is reaped)."""
        try:
            return self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # with whatever it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=REAP_SECONDS)
        except subprocess.TimeoutExpired:
            log.error("worker %s of function %s did not end after SIGKILL", self.process.pid, self.name)
        self.conn.close()


class Pool:
    """This process's workers. `limit`: calls at once in all; `root`: where runner.worker is found."""

    def __init__(self, limit, root):
        self.limit, self.root = limit, str(root)
        self.lock = threading.Lock()
        self.idle = defaultdict(list)  # key -> idle Workers, most recently used last
        self.running = defaultdict(int)  # function name -> calls running
        self.closed = False
        self.successors = queue.SimpleQueue()  # (worker, successor, keep) for the starter thread
        self.starter = None
        POOLS.add(self)

    def enter(self, name, concurrency):
        """Count a call in, or Refused when the process or the function is at its bound."""
        with self.lock:
            if sum(self.running.values()) >= self.limit or self.running[name] >= concurrency:
                raise Refused(name)
            self.running[name] += 1

    def leave(self, name):
        with self.lock:
            self.running[name] -= 1

    def take(self, key):
        """An idle worker for `key` that is still alive, or None; workers idle too long are let go."""
        stale, found = [], None
        now = time.monotonic()
        with self.lock:
            for other, workers in list(self.idle.items()):
                keep = [w for w in workers if now - w.used_at < IDLE_SECONDS]
                stale += [w for w in workers if now - w.used_at >= IDLE_SECONDS]
                if other[0] == key[0] and other != key:  # an older version of the function
                    stale += keep
                    keep = []
                self.idle[other] = keep
                if not keep:
                    del self.idle[other]
            while found is None and self.idle.get(key):
                candidate = self.idle[key].pop()
                if candidate.process.poll() is None:
                    found = candidate
                else:
                    stale.append(candidate)
        for worker in stale:
            worker.kill()
        return found

    def give_back(self, worker, max_calls, keep, successor):
        """Keep `worker` idle for its next call, unless its successor has taken its place or its
        function keeps `keep` idle ones already (its concurrency: as many as may be busy at once).

        A worker that has served `max_calls` is replaced without a call waiting for the new one:
        the pool's thread runs `successor()` (Pool.start's answer) while the worker goes on
        serving, and once the new one is ready the worker is let go (at once when idle, else at its
        return). Starting a process took ~40 ms of a call's time and most of a core: at 900 calls a
        second on 4 workers that was a start a second, and the p99 of a 2 ms call was 30-47 ms."""
        worker.used_at = time.monotonic()
        with self.lock:
            kept = not self.closed and not worker.succeeded and len(self.idle[worker.key]) < keep
            replace = kept and worker.calls == max_calls  # once: a call counts one at its return
            if kept:
                self.idle[worker.key].append(worker)
            if replace and self.starter is None:
                self.starter = threading.Thread(target=self._start_successors, name="function successors")
                self.starter.daemon = True
                self.starter.start()
        if not kept:
            worker.kill()
        elif replace:
            self.successors.put((worker, successor, keep))

    def _start_successors(self):
        """The thread that starts successors, for as long as the pool is open: a worker is killed when
        the thread that started it ends (PR_SET_PDEATHSIG, runner.worker, follows the thread, not the
        process), so it is never a thread of its own that ends once its worker is started."""
        while (job := self.successors.get()) is not None:
            self._succeed(*job)

    def _succeed(self, worker, successor, keep):
        started, _problem = successor()  # one that cannot start: the next call starts one, and says why
        with self.lock:
            worker.succeeded = True
            idle = self.idle.get(worker.key, [])
            let_go = worker in idle
            if let_go:
                idle.remove(worker)
            kept = started is not None and not self.closed and len(idle) < keep
            if kept:
                self.idle[started.key].append(started)
        if let_go:
            worker.kill()
        if started is not None and not kept:
            started.kill()

    def start(self, key, path, functions_dir, memory, cpu, environment, timeout):
        """A new worker for `key` that has imported the module at `path`: (worker, None), or
        (None, (kind, log lines)) when the module failed to boot ("boot"), or the boot took longer
        than `timeout` seconds ("timeout") or died ("crash")."""
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "runner.worker", str(theirs.fileno())],
                cwd=self.root,
                env={**environment, **WORKER_ENVIRONMENT, "PYTHONPATH": self.root},
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed with what it starts
            )
        except OSError as exc:  # a host that allows no more processes
            log.error("function %s: no worker process could start: %s", key[0], exc)
            ours.close()
            return None, ("crash", [])
        finally:
            theirs.close()
        worker = Worker(key, process, wire.Channel(ours))
        deadline = time.monotonic() + timeout
        try:
            wire.say(worker.conn, name=key[0], path=str(path), functions_dir=str(functions_dir),
                     memory=memory, cpu=cpu)  # fmt: skip
            with turns.waiting():  # the new process loads the function
                started = worker.wait(deadline - time.monotonic())
            if not started:
                worker.kill()
                return None, ("timeout", [])
            _, said = wire.hear(worker.conn)
        except (EOFError, OSError, ValueError):
            worker.kill()
            return None, ("crash", [])
        if said.get("ready"):
            return worker, None
        worker.kill()
        return None, ("boot", said.get("logs") or [])

    def close(self):
        """Let every idle worker go (at exit)."""
        with self.lock:
            self.closed = True
            workers = [w for ws in self.idle.values() for w in ws]
            self.idle.clear()
        self.successors.put(None)  # the starter ends, once it has started (and let go) what it had
        for worker in workers:
            worker.kill()
