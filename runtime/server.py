"""Serving the app with waitress: connection limits and timeouts so idle or slow clients cannot take
the service offline, and a drain on SIGTERM and SIGINT: the listener closes, requests in flight
finish and are answered (up to DRAIN_SECONDS), then serve() returns and the process exits 0.

What slow clients can hold is bounded (Server). waitress closes a connection only once it has been
silent for CHANNEL_TIMEOUT, and at CONNECTION_LIMIT it stops accepting: a thousand clients that
each send a header byte every few seconds (slowloris) held every slot, and /health went unanswered.
Here a request's headers must be in within HEADER_SECONDS of its first byte, however it trickles;
and at the limit the server keeps accepting: it closes the connections that have waited longest
without a whole request (idle, or a request still arriving) to make room, never one whose request
is being served or answered.

waitress answers some requests itself, before the app sees them: one it cannot parse (a bad byte in
the request line, a lowercase method, a header line without a colon), headers or a body over its
limits. Those are handed to the app (Refusal), which answers them in the JSON error body of the API
the path names, as it answers everything else. And a request without a body that asks
`Expect: 100-continue` is answered, not left waiting for a body that never comes (Channel)."""

import errno
import gc
import heapq
import logging
import re
import resource
import signal
import threading
import time

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import WSGITask
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, RequestHeaderFieldsTooLarge
from werkzeug.test import EnvironBuilder

import turns
from errors import OBJECT_TOO_LARGE, REFUSED_BY_SERVER

log = logging.getLogger("minibase")

CONNECTION_LIMIT = 1000  # open sockets; waitress's default (100) is taken by a hundred idle clients
CHANNEL_TIMEOUT = 20  # seconds a connection may sit idle or half-sent before it is closed
CLEANUP_INTERVAL = 2  # seconds between looks for such connections
RECV_BYTES = 65536  # a read of the socket: waitress's 8 KB made a 64 MB upload 8,192 turns of its loop
HEADER_SECONDS = 10  # a request's line and headers must be in within this of its first byte
ACCEPTS_PER_TURN = 50  # connections accepted in one turn of the loop; room is made for as many
DRAIN_SECONDS = 30
POLL_SECONDS = 0.5  # how long the loop waits for a socket before it looks at the stop flag again
FORM_BYTES = 1024 * 1024  # what a storage upload's form may add to the file (blueprints/storage.py)
REQUEST_LINE_BYTES = 8192  # what a refused request's start is kept of, to find its path
API_PREFIXES = ("/auth/v1", "/rest/v1", "/storage/v1")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The request headers a refused request is answered with: those that choose the error body's shape
# (an official SDK's), and the Origin a browser needs the CORS headers for to read the answer.
SHAPING_HEADERS = frozenset({"X_SUPABASE_API_VERSION", "X_CLIENT_INFO", "ACCEPT_PROFILE", "CONTENT_PROFILE",
                             "ORIGIN"})  # fmt: skip


# accept(2)'s errors that say the process, not the connection, is short of something (out of open
# files, of memory): accepting pauses REST_SECONDS, as asyncio's own server pauses; waitress logged a
# traceback and tried again at once, for as long as files lacked
SHORT_OF = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
REST_SECONDS = 1.0


GC_THRESHOLDS = (2000, 10, 100)  # the cycle collector's: young passes every 2,000 objects, full ones rarer


def settle_heap():
    """What start made (modules, the app, its reflected tables) lives as long as the process: kept
    out of the cycle collector's passes, and its full passes made rarer (cycles that die young are
    still collected young). With 1,000 Realtime sockets open, full passes over it all paused the
    server 160-380 ms and made the tail of change delivery; after, the longest pause was 48 ms."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _allow_open_files(needed):
    """Raise the soft limit on open files to `needed` where the hard limit allows: every connection
    is a file, and the usual soft limit (1024) is near the connection limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class Parser(HTTPRequestParser):
    """waitress's request parser, keeping the first bytes it was sent: a request it refuses may not
    have parsed as far as its path, or (headers over the limit) was parsed as `GET /` instead."""

    start = b""

    def received(self, data):
        if not self.headers_finished and len(self.start) < REQUEST_LINE_BYTES:
            self.start += data[: REQUEST_LINE_BYTES - len(self.start)]
        return super().received(data)


class Refusal(WSGITask):
    """A request waitress refused (`request.error`), answered by the app rather than in waitress's
    text/plain: the app gets a request for the API's root with the same method and the headers that
    shape an error body, and the HTTP error to raise (REFUSED_BY_SERVER), so that the answer is
    that API's JSON error, with the headers and the log line every answer has. The connection is
    closed after it: what follows a refused request on it cannot be trusted to be a request."""

    def execute(self):
        self.set_close_on_finish()
        super().execute()

    def get_environment(self):
        request = self.request
        method, path = requested(request.start)
        request.command, request.path, request.query, request.request_uri = method, path, "", path
        request.url_scheme = self.channel.server.adj.url_scheme
        request.headers = {name: value for name, value in request.headers.items() if name in SHAPING_HEADERS}
        request.body_rcv = None
        environ = super().get_environment()
        environ[REFUSED_BY_SERVER] = self.channel.server.http_error(request.error, path)
        return environ


def refusal(app, error, method, path, headers):
    """The app's answer to a request a server refused with the HTTP `error` (one of werkzeug's), for
    a server that writes the answer itself (uvicorn_seam.Protocol): (status line, headers, body)."""
    environ = EnvironBuilder(path=path, method=method, headers=headers).get_environ()
    environ[REFUSED_BY_SERVER] = error
    answer = {}

    def start_response(status, response_headers, exc_info=None):
        answer.update(status=status, headers=response_headers)

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return answer["status"], answer["headers"], body


def body_limit(limits, path):
    """(the largest body a request to `path` may have, the HTTP error for one larger), from the app's
    `limits`: an upload to storage takes STORAGE_FILE_SIZE_LIMIT and its form's other fields, a call
    of a function FUNCTIONS_MAX_BODY, the rest MAX_CONTENT_LENGTH."""
    if path.startswith("/storage/"):
        limit = limits["STORAGE_FILE_SIZE_LIMIT"]
        error = RequestEntityTooLarge(OBJECT_TOO_LARGE)
        return limit + FORM_BYTES, error
    functions = path.startswith("/functions/v1/") and limits.get("FUNCTIONS_MAX_BODY")
    limit = functions or limits["MAX_CONTENT_LENGTH"]
    return limit, RequestEntityTooLarge(f"The request body exceeds the limit of {limit} bytes")


def api_root(path):
    """The root of the API `path` is in, "/" for none."""
    return next((prefix for prefix in API_PREFIXES if path == prefix or path.startswith(prefix + "/")), "/")


def requested(start):
    """The method and the API root of a request from its first bytes, read leniently: (GET, "/")
    for what names neither a method nor one of the APIs."""
    words = start.lstrip().split(b"\r\n", 1)[0].split(b"\n", 1)[0].split(b" ")
    method = words[0].decode("latin-1")
    target = words[1].decode("latin-1") if len(words) > 1 else ""
    path = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*", "", target)  # absolute-form: http://host/path
    return (method if method in METHODS else "GET"), api_root(path)


class Channel(HTTPChannel):
    """waitress's connection, answering with Parser and Refusal, and knowing since when it has
    waited for a whole request (`waiting_since`)."""

    parser_class = Parser
    error_task_class = Refusal
    request_started = 0.0  # time.time() of the first byte of the request being received

    def received(self, data):
        if self.request is None and data:
            self.request_started = time.time()
        return super().received(data)

    def waiting_since(self):
        """When this connection began to wait for its next request: the first byte of the one
        arriving, else its last activity (its last answer, or its opening); None while a request
        is queued, served or answered, or the connection is closing."""
        if self.requests or self.total_outbufs_len or self.will_close or self.close_when_flushed:
            return None
        return self.request_started if self.request is not None else self.last_activity

    def headers_late(self, now):
        request = self.request
        return (
            request is not None
            and not request.headers_finished
            and now - self.request_started > HEADER_SECONDS
        )

    def send_continue(self):
        # A request with no body is complete once its headers are in: waitress would send
        # `100 Continue`, mark the request incomplete again and wait for a body that never comes.
        if self.request.completed:
            self.request.expect_continue = False
            return
        super().send_continue()


class Server(TcpWSGIServer):
    """waitress's server with minibase's Channel; `limits` are the app's request size limits that a
    refusal names."""

    channel_class = Channel
    # Out of open files, say (SHORT_OF): no accepting until `rest_until`, and under WORKERS no count
    # published until accept(2) finds a descriptor again (workers.Balance.guard), so that the others
    # take the connections this one cannot rather than hold back for it.
    resting = False
    rest_until = 0.0

    def __init__(self, app, limits, *args, **kwargs):
        super().__init__(app, *args, **kwargs)
        self.limits = limits

    def maintenance(self, now):
        """waitress's closing of connections silent for CHANNEL_TIMEOUT, and of those whose request's
        headers are late."""
        super().maintenance(now)
        for channel in list(self.active_channels.values()):
            if channel.headers_late(now):
                channel.will_close = True

    def readable(self):
        """Whether to accept: waitress's upkeep, then room made for ACCEPTS_PER_TURN more (waitress's
        own check would stop accepting at the limit)."""
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if time.monotonic() < self.rest_until:
            return False
        return self.accepting and self.make_room()

    def make_room(self):
        """Close the connections that have waited longest for a request until ACCEPTS_PER_TURN more
        fit under the limit; False when too many are busy with requests for that."""
        excess = len(self.active_channels) + ACCEPTS_PER_TURN - self.adj.connection_limit
        if excess <= 0:
            return True
        closing = sum(1 for channel in self.active_channels.values() if channel.will_close)
        waiting = [
            (since, fd)
            for fd, channel in self.active_channels.items()
            if (since := channel.waiting_since()) is not None
        ]
        for _, fd in heapq.nsmallest(excess - closing, waiting):
            self.active_channels[fd].will_close = True  # closed in this turn: it is writable
            closing += 1
        return closing >= excess

    def accept(self):
        """wasyncore's accept; short of open files or memory (SHORT_OF), a warning and a pause of
        REST_SECONDS rather than waitress's traceback and another try at once."""
        try:
            accepted = super().accept()
        except OSError as exc:
            if exc.errno not in SHORT_OF:
                raise
            log.warning("accepting a connection failed (%s); trying again in a second", exc)
            self.resting, self.rest_until = True, time.monotonic() + REST_SECONDS
            return None
        # A connection taken, or none waiting (None): either way the kernel found a descriptor, which
        # it looks for before the queue. So the uvicorn seam's Server.accept ends its rest too.
        self.resting = False
        return accepted

    def handle_accept(self):
        """Accept up to ACCEPTS_PER_TURN waiting connections (one a turn fell behind a crowd that
        reconnects), each while `readable` still says to: room, and a worker's share (workers.py)."""
        for turn in range(ACCEPTS_PER_TURN):
            before = len(self.active_channels)
            if turn and not self.readable():
                return
            super().handle_accept()
            if len(self.active_channels) == before:
                return

    def http_error(self, error, path):
        """The HTTP error the app answers for waitress's `error` of a request to `path`."""
        message = str(error.body)[:200]
        if error.code == 431:
            return RequestHeaderFieldsTooLarge(
                f"The request's headers exceed the limit of {self.adj.max_request_header_size} bytes"
            )
        if error.code == 413:
            return body_limit(self.limits, path)[1]
        # 400 (malformed), and 501 (a Transfer-Encoding other than chunked): a client's doing, a 400.
        return BadRequest(f"Malformed HTTP request: {message}")


def in_turns(app):
    """The WSGI app its threads call: on SQLite in turns (turns.py), so that one request at a time
    steps through its rows. On MySQL a request waits on the server, whose rows come in a few reads of
    the socket, and is left as it was: there, giving the turn up around each round trip and taking
    it back cost more than it saved (a read by key on MariaDB, one process: 1,280 requests a second
    in turns against 1,570 without)."""
    return turns.gated(app) if app.config["DATABASE_URL"].startswith("sqlite") else app


def limits_of(app):
    names = ("STORAGE_FILE_SIZE_LIMIT", "MAX_CONTENT_LENGTH", "FUNCTIONS_MAX_BODY")
    return {name: app.config.get(name) for name in names}


def make_server(app, host, port, threads, sockets=None):
    """A waitress server bound to host:port, or accepting on `sockets` (one, already listening)."""
    proxies = _trusted_proxies(app.config.get("TRUSTED_PROXIES", 0))
    _allow_open_files(CONNECTION_LIMIT + 100)
    # Under load waitress logs a warning for every queued request; the request log says enough.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    adjustments = Adjustments(
        **({} if sockets else {"host": host, "port": port}),
        threads=threads,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=CHANNEL_TIMEOUT,
        cleanup_interval=CLEANUP_INTERVAL,
        ident="minibase",
        # waitress buffers a body before the app sees it: past the largest upload (and its form), stop.
        max_request_body_size=max(
            app.config["STORAGE_FILE_SIZE_LIMIT"] + FORM_BYTES, app.config.get("FUNCTIONS_MAX_BODY") or 0
        ),  # fmt: skip
        recv_bytes=RECV_BYTES,
        **proxies,
    )
    limits, gated = limits_of(app), in_turns(app)
    if not sockets:
        return Server(gated, limits, {}, adj=adjustments)
    (sock,) = sockets
    where = (sock.family, sock.type, sock.proto, sock.getsockname())
    return Server(gated, limits, {}, _sock=sock, adj=adjustments, bind_socket=False, sockinfo=where)


def _trusted_proxies(hops):
    """waitress's proxy settings for TRUSTED_PROXIES: by default it deletes X-Forwarded-* before the
    app could read them, and every client behind the proxy would be one IP. With a proxy in front
    they are passed on untouched to the app's ProxyFix, which takes the client from the last `hops`
    entries (and, unlike waitress's own parsing, answers no garbage in them with a 400 of its own)."""
    if not hops:
        return {}  # the headers are dropped: a client cannot choose its own rate-limit bucket
    return {"clear_untrusted_proxy_headers": False}


def serve(server, stop=None, drain_seconds=DRAIN_SECONDS):
    """Run `server` until SIGTERM or SIGINT (or `stop` is set, when given), then drain it."""
    if stop is None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set():
        wasyncore.loop(timeout=POLL_SECONDS, map=server._map, use_poll=True, count=1)
    drain(server, drain_seconds)


def busy(server):
    """Whether a request is queued, running, being received or its answer not yet sent."""
    dispatcher = server.task_dispatcher
    if dispatcher.active_count or dispatcher.queue:
        return True
    return any(
        channel.requests or channel.request is not None or channel.total_outbufs_len
        for channel in list(server.active_channels.values())
    )


def drain(server, seconds):
    """Stop accepting, let what is in flight finish and be sent (up to `seconds`), then close."""
    log.info("stopping: no new connections, finishing the requests in flight")
    wasyncore.dispatcher.close(server)  # the listening socket only; the loop's trigger stays
    deadline = time.monotonic() + seconds
    while busy(server) and time.monotonic() < deadline:
        wasyncore.loop(timeout=0.05, map=server._map, use_poll=True, count=1)
    if busy(server):
        log.warning("stopping: requests still in flight after %s s are cut off", seconds)
    server.task_dispatcher.shutdown(timeout=1)
    wasyncore.close_all(server._map)
    log.info("stopped")
