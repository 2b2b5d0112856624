"""The served process's log: INFO and above to stderr, written in batches by a thread of its own.

A request thread only appends its record to a deque. The writer looks every INTERVAL seconds,
formats what it finds and writes it in one call. Both simpler designs cost more than the request
itself under load (measured through waitress, 8 threads, 16 connections): request threads writing
their own lines queued for the handler's lock; a writer woken for each line (logging's
QueueListener) took the GIL from the request threads once a line, and each handover waits on the
others.

LOG_FORMAT=json writes each record as one JSON object on a line (python-json-logger): time, level,
logger, message, and a request's line adds its fields (blueprints.gateway.request_fields). A record
logged while a request is served carries that request's id; a warning or an error names it, in the
text format too, so that the cause of a 5xx can be found from its X-Request-Id.

Under WORKERS every process writes to the one stderr it inherited: a write of at most PIPE_BUF
bytes to a pipe is never interleaved with another's, so each write is a run of whole lines that
fits (a line longer than that is written alone).
"""

import collections
import logging
import logging.handlers
import select
import sys
import threading
import time

from flask import g, has_request_context
from pythonjsonlogger.json import JsonFormatter

INTERVAL = 0.1  # seconds between two looks at the queue: the longest a line waits to be written
MAX_QUEUED = 100_000  # records; past this (stderr not read, say) new ones are counted, not kept
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_FIELDS = "%(levelname)s %(name)s %(message)s"  # besides `time`, and a request's own fields
WRITE_CHARS = select.PIPE_BUF // 4  # characters in one write: at most PIPE_BUF bytes of UTF-8


class _Records(collections.deque):
    """QueueHandler's queue: append only, nothing to wake; bounded, counting what it drops."""

    dropped = 0

    def put_nowait(self, record):
        if len(self) < MAX_QUEUED:
            self.append(record)
        else:
            self.dropped += 1


class _Enqueue(logging.handlers.QueueHandler):
    def handle(self, record):
        # The writer formats the record itself, in this process: nothing to make picklable, and a
        # deque's append needs no lock. A filter added to the handler still applies.
        if self.filters and not self.filter(record):
            return False
        with_request_id(record)
        self.queue.put_nowait(record)
        return True


def with_request_id(record):
    """Mark `record` with the id of the request being served, if any (in the thread that logs it)."""
    if not hasattr(record, "request_id") and has_request_context():
        record.request_id = getattr(g, "request_id", None)


class _Formatter(logging.Formatter):
    """FORMAT, with the date and time written once a second rather than once a line: time.strftime
    was a third of a request line's formatting. A warning or an error logged while serving a
    request ends with the request's id."""

    _second = None
    _text = ""

    def formatTime(self, record, datefmt=None):  # noqa: N802 (logging's name)
        second = int(record.created)
        if second != self._second:
            self._text, self._second = time.strftime(self.default_time_format, self.converter(second)), second
        return self.default_msec_format % (self._text, record.msecs)

    def formatMessage(self, record):  # noqa: N802 (logging's name)
        text = super().formatMessage(record)
        if record.levelno >= logging.WARNING and getattr(record, "request_id", None):
            text += f" (request {record.request_id})"
        return text


class _JsonFormatter(JsonFormatter):
    """One JSON object a record, `time` in UTC (ISO 8601), `level`, `logger`, `message`, and what the
    record carries besides (a request's fields, its id)."""

    def __init__(self):
        renamed = {"levelname": "level", "name": "logger"}
        super().__init__(JSON_FIELDS, rename_fields=renamed, timestamp="time")


def formatter(log_format="text"):
    """The formatter of LOG_FORMAT `log_format`."""
    return _JsonFormatter() if log_format == "json" else _Formatter(FORMAT)


class Writer:
    """The thread that writes the queued records to `stream`; `stop` writes what is left."""

    def __init__(self, stream=None, interval=INTERVAL, log_format="text"):
        self.records = _Records()
        self.stream = stream or sys.stderr
        self.interval = interval
        self.formatter = formatter(log_format)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log writer", daemon=True)

    def handler(self):
        """The logging handler that queues records for this writer."""
        return _Enqueue(self.records)

    def start(self):
        self._thread.start()
        return self

    def stop(self, timeout=5):
        """Stop the thread and write what is still queued, unless a write is stuck (a stderr
        nobody reads): then the process must not wait on it to exit."""
        self._stopping.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.write_pending()

    def _run(self):
        while not self._stopping.wait(self.interval):
            self.write_pending()

    def write_pending(self):
        lines = []
        for _ in range(len(self.records)):  # what is there now: a flood cannot keep this loop going
            record = self.records.popleft()
            try:
                lines.append(self.formatter.format(record))
            except Exception:  # a bad format string in a log call: say so, as logging would
                lines.append(f"unloggable record from {record.name} at {record.pathname}:{record.lineno}")
        dropped, self.records.dropped = self.records.dropped, 0
        if dropped:
            message = "%s log records dropped: more than %s were waiting to be written"
            note = logging.LogRecord(
                "minibase", logging.WARNING, __file__, 0, message, (dropped, MAX_QUEUED), None
            )
            lines.append(self.formatter.format(note))
        try:
            for piece in _pieces(lines):
                self.stream.write(piece)
                self.stream.flush()
        except (OSError, ValueError):  # stderr closed or broken: nowhere to say so; keep draining
            pass


def _pieces(lines):
    """`lines` as texts of whole lines, each of at most WRITE_CHARS characters where it can be."""
    piece, size = [], 0
    for line in lines:
        if piece and size + len(line) + 1 > WRITE_CHARS:
            yield "".join(piece)
            piece, size = [], 0
        piece.append(line + "\n")
        size += len(line) + 1
    if piece:
        yield "".join(piece)


def log_in_batches(log_format="text"):
    """Route INFO and above through a started Writer to stderr, in LOG_FORMAT `log_format`; the
    caller stops it at exit."""
    # Records skip what the format never shows (the logging HOWTO's "Optimization"): the thread's
    # and the process's names and ids, and the caller's file and line, found by walking the stack.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    writer = Writer(log_format=log_format).start()
    # force: a worker replaces the handler it inherited from the parent (log_directly)
    logging.basicConfig(level=logging.INFO, handlers=[writer.handler()], force=True)
    return writer


def log_directly(log_format="text"):
    """INFO and above to stderr, written at once by the thread that logs: for the parent of the
    workers, which logs a line now and then and must not fork with a writer thread running."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
