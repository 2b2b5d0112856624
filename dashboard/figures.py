"""The Health page's figures, from the same series /metrics serves (metrics.py): request rate, error
rate and the 95th percentile of latency over the last WINDOW seconds (against the oldest reading
this process kept within it, else since the service started), database waits, open Realtime
sockets and the webhook backlog. None when METRICS is off."""

import collections
import math
import threading
import time
from dataclasses import dataclass

import metrics

WINDOW = 300  # seconds the rates are taken over, at most
KEPT = 64  # readings kept: one a page view, the oldest dropped first
_readings = collections.deque(maxlen=KEPT)  # (time.monotonic(), totals)
_lock = threading.Lock()
_started = time.monotonic()


@dataclass(frozen=True)
class Figures:
    seconds: float  # what the rates are taken over
    request_rate: float  # requests a second
    error_rate: float | None  # the share of them answered 5xx; None without requests
    p95_seconds: float | None  # None without requests
    database_waits: int  # lock waits that timed out, deadlocks and requests the database left unanswered
    realtime_sockets: int
    webhook_backlog: int


def figures():
    if not metrics.enabled():
        return None
    now, totals = time.monotonic(), _totals(metrics.samples())
    with _lock:
        while _readings and now - _readings[0][0] > WINDOW:
            _readings.popleft()
        then, before = _readings[0] if _readings else (_started, {})
        _readings.append((now, totals))
    seconds = max(now - then, 1e-9)
    requests = totals["requests"] - before.get("requests", 0)
    errors = totals["errors"] - before.get("errors", 0)
    buckets = {
        bound: count - before.get("buckets", {}).get(bound, 0) for bound, count in totals["buckets"].items()
    }
    return Figures(
        seconds=seconds,
        request_rate=requests / seconds,
        error_rate=errors / requests if requests else None,
        p95_seconds=_quantile(0.95, buckets),
        database_waits=int(totals["waits"]),
        realtime_sockets=int(totals["sockets"]),
        webhook_backlog=int(totals["backlog"]),
    )


def _totals(samples):
    totals = {"requests": 0.0, "errors": 0.0, "waits": 0.0, "sockets": 0.0, "backlog": 0.0, "buckets": {}}
    waits = (
        "minibase_db_lock_wait_timeouts_total",
        "minibase_db_deadlocks_total",
        "minibase_db_timeouts_total",
    )
    for (name, labels), value in samples.items():
        labelled = dict(labels)
        if name == "minibase_http_requests_total":
            totals["requests"] += value
            totals["errors"] += value if labelled.get("status") == "5xx" else 0
        elif name == "minibase_http_request_duration_seconds_bucket":
            bound = float(labelled["le"])
            totals["buckets"][bound] = totals["buckets"].get(bound, 0.0) + value
        elif name in waits:
            totals["waits"] += value
        elif name == "minibase_realtime_sockets":
            totals["sockets"] += value
        elif name == "minibase_webhook_backlog":
            totals["backlog"] += value
    return totals


def _quantile(q, buckets):
    """Prometheus's histogram_quantile over cumulative `buckets` (upper bound -> count)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bucket: its bound, as Prometheus answers
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower
