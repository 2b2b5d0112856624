"""The threads that send webhooks and run schedules in a serving process (`python wsgi.py`, each of
its WORKERS): one per hook, so a dead or slow receiver holds back only its own hook, and one that
looks at the clock and trims the history. Every instance runs them; the claims in the database
(webhooks/outbox.py, webhooks/schedules.py) make each delivery and each run happen once."""

import json
import logging
import threading
import time

from sqlalchemy.exc import DBAPIError, OperationalError

import metrics
from live import capture
from tables_toml import webhooks as settings
from variables import ConfigError
from webhooks import functions, outbox, schedules

log = logging.getLogger("minibase")

TRIM_SECONDS = 60.0  # between two trims of the history
ERROR_PAUSE = 1.0  # after the database failed a step


def init_app(app):
    """Refuse to start when a URL target has nothing to sign with, or WEBHOOK_SECRET is no secret."""
    secret = app.config.get("WEBHOOK_SECRET")
    if secret and not settings.SECRET.fullmatch(secret):
        raise ConfigError("WEBHOOK_SECRET must be a Standard Webhooks secret, whsec_<base64> (v1, optional)")
    declared = app.extensions["minibase"].tables_toml
    for kind, entries in (("webhooks", declared.webhooks), ("schedules", declared.schedules)):
        for entry in entries.values():
            if entry.target.url and not (entry.target.secret or secret):
                raise ConfigError(
                    f"[{kind}.{entry.name}]: a url target is signed: set its secret, or WEBHOOK_SECRET"
                )


def retry_delay(base):
    """Seconds before attempt n+1 after n failed: base, then doubled each time, at most an hour."""
    return lambda attempts: min(base * 2 ** (attempts - 1), 3600.0)


class Background:
    """The threads of one serving process. start() and stop() from the process's main thread."""

    def __init__(self, app, clock=time.time):
        self.app = app
        self.clock = clock
        self.instance = outbox.instance_name()
        self.stopping = threading.Event()
        self.threads = []

    def start(self):
        state = self.app.extensions["minibase"]
        if not self.app.config.get("BACKGROUND", True):
            return self
        hooks, planned = state.tables_toml.webhooks, schedules.planned(state)
        for hook in hooks.values():
            self._thread(f"webhook {hook.name}", self.deliver, hook)
        if hooks or planned:
            self._thread("schedules", self.keep_time)
        return self

    def stop(self, seconds=5.0):
        self.stopping.set()
        deadline = time.monotonic() + seconds
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _thread(self, name, target, *args):
        def body():
            with self.app.app_context():
                target(*args)

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _secret(self, target):
        return target.secret or self.app.config.get("WEBHOOK_SECRET")

    def deliver(self, hook):
        """One hook's loop: make its table's triggers, then take changes in and send them in order."""
        poll = self.app.config.get("WEBHOOK_POLL_SECONDS", 0.5)
        retry = retry_delay(self.app.config.get("WEBHOOK_RETRY_SECONDS", 1.0))
        lasts = hook.target.timeout
        if hook.target.function is not None:
            lasts = functions.timeout(hook.target.function, self.app.config.get("FUNCTIONS_TIMEOUT", 150.0))
        queue, installed = outbox.Queue(hook, self.instance, lasts), False
        while not self.stopping.is_set():
            try:
                if queue.since is None:  # before the triggers: every change they capture is after it
                    queue.since = outbox.first_seen("webhook", hook.name, self.clock())
                if not installed:
                    installed = capture.install([hook.table]).get(hook.table) is None
                    if not installed:
                        self.stopping.wait(30 * ERROR_PAUSE)
                        continue
                now = self.clock()
                queue.take_in(now)
                due, wait = queue.due(now)
                if not due:  # none pending, the first not yet due, or another instance sending it
                    self.stopping.wait(max(min(poll, poll if wait is None else wait), 0.01))
                    continue
                lease = queue.claim(due, now)
                if lease is not None:
                    self._send_batch(hook, queue, due, lease, retry)
            except (DBAPIError, OperationalError) as exc:
                log.warning("webhooks: %s: the database failed a step: %s", hook.name, outbox._first(exc))
                self.stopping.wait(ERROR_PAUSE)
            except Exception:
                log.exception("webhooks: %s: a step failed", hook.name)
                self.stopping.wait(ERROR_PAUSE)

    def _send_batch(self, hook, queue, claimed, lease, retry):
        """Send the claimed deliveries one after another, stopping at the first that fails (the
        later ones wait for it: order) or when one more POST could outlast the lease."""
        sent = []
        for delivery in claimed:
            if sent and (self.stopping.is_set() or time.time() + queue.lasts > lease - 1):
                break
            started = time.time()
            outcome = self._send(hook, delivery)
            sent.append((delivery, outcome, started))
            if not outcome.ok:
                break
        statuses = queue.record(sent, claimed[len(sent) :], retry)
        for (delivery, outcome, _), status in zip(sent, statuses, strict=True):
            (metrics.WEBHOOK_DELIVERIES if outcome.ok else metrics.WEBHOOK_FAILURES).inc()
            if status == "failed":
                log.warning(
                    "webhooks: %s gave up on event %s after %d attempts: %s",
                    hook.name, delivery.event_id, delivery.attempts + 1, outcome.error,
                )  # fmt: skip

    def _send(self, hook, delivery):
        if hook.target.function is not None:
            return functions.call(hook.target.function, json.loads(delivery.payload))
        return outbox.send(hook, delivery, self._secret(hook.target))

    def keep_time(self):
        """The schedules' loop: claim and start what is due, each tick; trim the history now and then."""
        state = self.app.extensions["minibase"]
        tick = self.app.config.get("SCHEDULE_TICK_SECONDS", 1.0)
        keep = self.app.config.get("WEBHOOK_HISTORY_DAYS", 7) * 86400
        secret = self.app.config.get("WEBHOOK_SECRET")
        scheduler = schedules.Scheduler(schedules.planned(state), secret, self.instance)
        trimmed = 0.0
        while not self.stopping.is_set():
            try:
                now = self.clock()
                for schedule, run_id, due in scheduler.tick(now):
                    schedules.start_run(schedule, run_id, due, self._secret(schedule.target), self.app)
                if time.monotonic() - trimmed > TRIM_SECONDS:
                    trimmed = time.monotonic()
                    outbox.trim(keep, now)
                    schedules.trim(keep, now)
            except (DBAPIError, OperationalError) as exc:
                log.warning("schedules: the database failed a step: %s", outbox._first(exc))
            except Exception:
                log.exception("schedules: a step failed")
            self.stopping.wait(tick)
