"""Every call: one log line (function, method, status, duration, error code) and the function's own
lines after it, and the last RECENT calls kept in memory for the dashboard's Functions page.

A ring in memory, not a table: a call writes nothing to the database (a function as fast as a key
read stays so, and a Galera cluster certifies no write per call); the log keeps every call for as
long as the operator keeps logs. Each process keeps its own ring: under WORKERS the page shows the
calls the process serving it has answered."""

import logging
import threading
import time
from collections import deque

log = logging.getLogger("minibase.functions")
RECENT = 200  # calls kept for the dashboard
LINES_KEPT = 50  # of a call's own log lines, for the dashboard (the log has them all)


REDACTED = "[redacted]"


class Journal:
    """`secrets`: texts never written to the log or kept, even when a function prints them (the
    service_role key a traceback can hold)."""

    def __init__(self, secrets=(), size=RECENT):
        self.secrets = [secret for secret in secrets if secret]
        self.calls = deque(maxlen=size)
        self.lock = threading.Lock()
        self.counter = 0

    def record(self, function, method, status, seconds, error_code, lines):
        level = logging.WARNING if status >= 500 else logging.INFO
        lines = [self.redact(line) for line in lines]
        log.log(level, "function %s %s %s %.1fms%s", function, method, status, seconds * 1000,
                f" {error_code}" if error_code else "")  # fmt: skip
        for line in lines:
            log.log(level, "function %s: %s", function, line)
        with self.lock:
            self.counter += 1
            self.calls.append(
                {
                    "id": self.counter,
                    "at": time.time(),
                    "function": function,
                    "method": method,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 1),
                    "error_code": error_code,
                    "lines": list(lines[:LINES_KEPT]),
                }
            )

    def redact(self, line):
        for secret in self.secrets:
            line = line.replace(secret, REDACTED)
        return line

    def recent(self, function=None):
        """The calls kept, newest first; of one function when named."""
        with self.lock:
            calls = list(self.calls)
        return [call for call in reversed(calls) if function is None or call["function"] == function]
