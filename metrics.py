"""The service's Prometheus series (docs/operations.md), every one named here, importable by any module
at no cost. Until `enable` (METRICS=on) each series is OFF, whose methods do nothing: code counts
unconditionally, and a service without metrics imports nothing of prometheus-client and pays one
empty method call per count. Use a series through the module, `metrics.DB_RETRIES.inc()`, never
`from metrics import …`: `enable` replaces the module's names.

Under WORKERS every process counts into files of its own in a folder made for the run
(prometheus-client's multiprocess mode, PROMETHEUS_MULTIPROC_DIR), and /metrics adds them up: every
worker's counts, once, those of workers that died included; a dead worker's gauges are dropped
(`process_exited`)."""

import atexit
import functools
import os
import shutil
import tempfile

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's own variable
# The APIs a request's path belongs to, by prefix; anything else (/health, /metrics…) is "other".
APIS = (
    ("/auth/v1", "auth"),
    ("/rest/v1", "rest"),
    ("/storage/v1", "storage"),
    ("/realtime/v1", "realtime"),
    ("/functions/v1", "functions"),
    ("/dashboard", "dashboard"),
)


class _Off:
    """A series while metrics are off: takes every call, keeps nothing."""

    def labels(self, *args, **kwargs):
        return self

    def inc(self, amount=1):
        pass

    def dec(self, amount=1):
        pass

    def set(self, value):
        pass

    def observe(self, amount):
        pass


OFF = _Off()

# name in this module: (kind, Prometheus name, help, label names, a gauge's multiprocess mode)
SERIES = {
    "REQUESTS": ("counter", "minibase_http_requests_total",
                 "HTTP requests answered, by API and status class", ("api", "status")),
    "REQUEST_SECONDS": ("histogram", "minibase_http_request_duration_seconds",
                        "Time from a request's start to its answer, by API", ("api",)),
    "RATE_LIMITED": ("counter", "minibase_rate_limit_refusals_total", "Requests refused with 429, by API",
                     ("api",)),
    "DB_CONNECTIONS_IN_USE": ("gauge", "minibase_db_connections_in_use",
                              "Database connections checked out of the pools", (), "livesum"),
    "DB_LOCK_WAIT_TIMEOUTS": ("counter", "minibase_db_lock_wait_timeouts_total",
                              "Statements that waited for another transaction's lock until it timed out"),
    "DB_DEADLOCKS": ("counter", "minibase_db_deadlocks_total",
                     "Transactions refused as a deadlock (on Galera, a lost certification too)"),
    "DB_RETRIES": ("counter", "minibase_db_retries_total",
                   "Units of work tried again after a deadlock, a lock wait timeout or a lost connection"),
    "DB_TIMEOUTS": ("counter", "minibase_db_timeouts_total",
                    "Requests answered 503 because the database did not answer within DB_TIMEOUT or "
                    "STATEMENT_TIMEOUT, or at all"),
    "REALTIME_SOCKETS": ("gauge", "minibase_realtime_sockets", "Open Realtime WebSockets", (), "livesum"),
    "REALTIME_CHANNELS": ("gauge", "minibase_realtime_channels", "Channels joined on open Realtime sockets",
                          (), "livesum"),
    "REALTIME_DELIVERIES": ("counter", "minibase_realtime_deliveries_total",
                            "Messages sent to Realtime sockets (replies, broadcasts, presence, changes)"),
    "REALTIME_LAG": ("gauge", "minibase_realtime_change_feed_lag_seconds",
                     "Age of the last database change when the change feed read it", (), "livemax"),
    "HOOK_CALLS": ("counter", "minibase_hook_calls_total", "Auth hook calls, by hook", ("hook",)),
    "HOOK_FAILURES": ("counter", "minibase_hook_failures_total",
                      "Auth hook calls that failed (no answer, an error status, a bad body)", ("hook",)),
    "MAILS_SENT": ("counter", "minibase_mails_sent_total", "E-mails handed to the SMTP server"),
    "MAILS_FAILED": ("counter", "minibase_mails_failed_total", "E-mails the SMTP server did not take"),
    "STORAGE_BYTES_IN": ("counter", "minibase_storage_bytes_in_total", "Bytes of objects uploaded"),
    "STORAGE_BYTES_OUT": ("counter", "minibase_storage_bytes_out_total", "Bytes of objects downloaded"),
    "FUNCTION_CALLS": ("counter", "minibase_function_calls_total", "Edge function calls, by status class",
                       ("status",)),
    "WEBHOOK_DELIVERIES": ("counter", "minibase_webhook_deliveries_total",
                           "Database webhook deliveries made"),
    "WEBHOOK_FAILURES": ("counter", "minibase_webhook_failures_total",
                         "Database webhook delivery attempts that failed"),
    "WEBHOOK_BACKLOG": ("gauge", "minibase_webhook_backlog", "Database webhook deliveries waiting to be made",
                        (), "mostrecent"),
    "SCHEDULE_RUNS": ("counter", "minibase_schedule_runs_total", "Scheduled runs, by outcome", ("outcome",)),
    "TURNS_WAITED_OUT": ("counter", "minibase_turns_waited_out_total",
                         "Requests that ran beside the one holding the turn (SQLite): they waited 50 ms "
                         "for it, or found it held longer"),
}  # fmt: skip

REQUESTS = REQUEST_SECONDS = RATE_LIMITED = OFF
DB_CONNECTIONS_IN_USE = DB_LOCK_WAIT_TIMEOUTS = DB_DEADLOCKS = DB_RETRIES = DB_TIMEOUTS = OFF
REALTIME_SOCKETS = REALTIME_CHANNELS = REALTIME_DELIVERIES = REALTIME_LAG = OFF
HOOK_CALLS = HOOK_FAILURES = MAILS_SENT = MAILS_FAILED = STORAGE_BYTES_IN = STORAGE_BYTES_OUT = OFF
FUNCTION_CALLS = WEBHOOK_DELIVERIES = WEBHOOK_FAILURES = WEBHOOK_BACKLOG = SCHEDULE_RUNS = OFF
TURNS_WAITED_OUT = OFF

_registry = None  # this process's series, once enabled
_answered = {}  # (api, status // 100) -> its REQUESTS, REQUEST_SECONDS and RATE_LIMITED children


def enabled():
    return _registry is not None


def enable(workers=1):
    """Make every series real, once per process. With several `workers` (forked after this) they
    count in prometheus-client's multiprocess mode, in PROMETHEUS_MULTIPROC_DIR: the operator's, or
    a folder made for this run and removed when the process that made it exits."""
    global _registry
    if _registry is not None:
        return
    if workers > 1 and not os.environ.get(MULTIPROCESS_DIR):
        folder = tempfile.mkdtemp(prefix="minibase-metrics-")
        made_by = os.getpid()
        atexit.register(lambda: os.getpid() == made_by and shutil.rmtree(folder, ignore_errors=True))
        os.environ[MULTIPROCESS_DIR] = folder
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        disable_created_metrics,
        values,
    )

    disable_created_metrics()  # a _created series beside each counter says nothing an operator reads

    if os.environ.get(MULTIPROCESS_DIR) and not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()  # prometheus-client was imported before the folder
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    registry = CollectorRegistry(auto_describe=True)
    for attribute, (kind, name, documentation, *rest) in SERIES.items():
        labels, mode = (*rest, (), None)[:2]
        options = {"multiprocess_mode": mode} if mode else {}
        globals()[attribute] = kinds[kind](name, documentation, labels, registry=registry, **options)
    _registry = registry


def api_of(path):
    for prefix, api in APIS:
        if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
            return api
    return "other"


def answered(path, status, seconds):
    """Count a request to `path` answered with `status` after `seconds`."""
    if _registry is None:
        return
    api = api_of(path)
    key = (api, status // 100)
    children = _answered.get(key)
    if children is None:
        children = _answered[key] = (
            REQUESTS.labels(api, f"{status // 100}xx"),
            REQUEST_SECONDS.labels(api),
            RATE_LIMITED.labels(api),
        )
    children[0].inc()
    children[1].observe(seconds)
    if status == 429:
        children[2].inc()


def exposition():
    """(the text of every series, its content type), every worker's counts added up."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(_collected()), CONTENT_TYPE_LATEST


def samples():
    """Every sample now, every worker's added up: {(sample name, ((label, value), …)): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in _collected().collect()
        for sample in family.samples
    }


def _collected():
    """The registry to read: this process's, or under WORKERS one that reads every worker's files."""
    if _registry is None:
        raise RuntimeError("metrics are not enabled")
    folder = os.environ.get(MULTIPROCESS_DIR)
    if not folder:
        return _registry
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    _workers_collector()(registry, path=folder)
    return registry


@functools.cache
def _workers_collector():
    """prometheus-client's collector of every worker's files, leaving out a file not yet sized.

    A worker creates its file and only then sizes it; read in between, the empty file fails the whole
    scrape, and a worker killed in between leaves it empty for good (client_python issue 1199). A
    file, once sized, only grows, so one found non-empty at the listing is whole enough to read."""
    import glob

    from prometheus_client import multiprocess

    class WorkersCollector(multiprocess.MultiProcessCollector):
        def collect(self):
            return self.merge([path for path in glob.glob(os.path.join(self._path, "*.db")) if _sized(path)])

    return WorkersCollector


def _sized(path):
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:  # a dead worker's gauges, dropped since the listing
        return False


def process_exited(pid):
    """Drop the gauges of a worker that exited (its counters stay counted)."""
    if _registry is not None and os.environ.get(MULTIPROCESS_DIR):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
