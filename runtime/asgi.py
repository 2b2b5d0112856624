"""Serving with Realtime on (REALTIME, the default under `python wsgi.py`): waitress cannot hold a
WebSocket, so uvicorn serves the port. Its websockets protocol (the `websockets` library) carries
/realtime/v1/websocket to the Realtime server (realtime/sessions.py); every other request goes to
the Flask app unchanged, on a pool of threads (Threads), as waitress runs it.

SIGTERM or SIGINT: every socket is closed with 1001 (going away), then uvicorn stops accepting,
lets the requests in flight finish (up to DRAIN_SECONDS) and returns."""

import asyncio
import collections
import contextlib
import contextvars
import io
import json
import logging
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn
from a2wsgi.wsgi import build_environ
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from werkzeug.exceptions import BadRequest, RequestHeaderFieldsTooLarge
from werkzeug.wsgi import FileWrapper

from live import sessions
from runtime import server as waitress_server
from storage import files

log = logging.getLogger("minibase")
CLOSE_SECONDS = 3  # how long the sockets have to take their 1001 before the listener closes
MAX_SOCKETS = 10000  # open files the process asks for: thousands of idle sockets are the use
MAX_HEADER_BYTES = 256 * 1024  # a request's line and headers, as waitress's limit
SPOOL_BYTES = 512 * 1024  # a request body past this is kept in a temporary file (waitress's inbuf_overflow)
BATCH = 1024 * 1024  # a storage body's bytes handed to the spooling thread at a time (Spooling)
AHEAD = 4  # batches the loop may receive ahead of that thread
BODY = "minibase.body"  # the scope's key for the request's body, read whole (read_body)


FILE_BLOCK = 256 * 1024  # a download's bytes per hand-over from the app's thread to the event loop
WHOLE_BYTES = 256 * 1024  # a response up to this long (its Content-Length) is sent in one hand-over
ZERO_COPY = "http.response.zerocopysend"  # ASGI's extension: a file sent with sendfile(2) (Cycle)


class SentFile(FileWrapper):
    """wsgi.file_wrapper: a download's open file. Threads hands it to the event loop whole, in one
    hand-over, to be sent with sendfile(2) (ZERO_COPY); where the server does not offer that, or a
    middleware wraps the response, it is read in blocks of at least FILE_BLOCK (werkzeug's own 8 KB
    blocks made a 1 MB download 128 hand-overs, most of its cost)."""

    def __init__(self, file, block_size=FILE_BLOCK):
        super().__init__(file, max(block_size, FILE_BLOCK))


class Threads:
    """The Flask app run on a pool of `threads` threads, one request at a time on each, in a copy of
    the loop's context (what a request sets in a ContextVar stays its own).

    A thread and the event loop hand a request over as few times as they can: every hand-over waits
    for the other side to take the GIL, and under load that wait is most of a small request's cost
    (a2wsgi's four a request, the headers, the body, its end and the return, cost a read behind the
    gateway twice the CPU it costs under waitress). A response whose length is known and at most WHOLE_BYTES,
    or that has no body (HEAD, 204, 304), is made whole on the thread and comes back with the
    thread's return: one hand-over. A whole file (a download, SentFile) goes with its headers in one
    hand-over too, sent by the loop with sendfile(2) while the thread waits, then closed. Any other
    (a range of a file, a streamed export) is sent as it is produced, a block a hand-over, the
    headers with the first block."""

    def __init__(self, app, threads):
        self.app = app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="WSGI")

    async def __call__(self, scope, body, send):
        loop = asyncio.get_running_loop()
        environ = build_environ(scope, body)
        run = contextvars.copy_context().run
        whole = await loop.run_in_executor(self.executor, run, self.respond, environ, loop, send)
        if whole is not None:
            start, content = whole
            await send(start)
            await send({"type": "http.response.body", "body": content})

    def respond(self, environ, loop, send):
        """On a thread of the pool: (the start message, the body) of a response made whole, or None
        once a response that is not has been sent."""
        started = []

        def start_response(status, headers, exc_info=None):
            if exc_info is not None and sent:
                raise exc_info[1].with_traceback(exc_info[2])  # too late to change the headers
            started[:] = [status, headers]

        def hand_over(*messages):
            asyncio.run_coroutine_threadsafe(_send_all(send, messages), loop).result()

        sent = False
        chunks = self.app(environ, start_response)
        try:
            if started and _made_whole(environ, *started):
                return _start(*started), b"".join(chunks)
            if started and (whole_file := _zero_copy(environ, chunks, started[1])) is not None:
                hand_over(_start(*started), whole_file)
                return None
            for chunk in chunks:
                if chunk:
                    hand_over(*([] if sent else [_start(*started)]), _body(chunk, more=True))
                    sent = True
            hand_over(*([] if sent else [_start(*started)]), _body(b"", more=False))
            sent = True
            return None
        finally:
            getattr(chunks, "close", lambda: None)()


async def _send_all(send, messages):
    for message in messages:
        await send(message)


def _made_whole(environ, status, headers):
    """Whether the response is short enough, or bodiless, to be made whole on the thread."""
    if environ["REQUEST_METHOD"] == "HEAD" or status[:3] in ("204", "304"):
        return True
    length = _content_length(headers)
    return length is not None and length <= WHOLE_BYTES


def _content_length(headers):
    for name, value in headers:
        if name.lower() == "content-length":
            return int(value) if value.isdigit() else None
    return None


def _zero_copy(environ, chunks, headers):
    """The ZERO_COPY message that sends a response which is a whole file (SentFile) of a known
    length, from where the file stands; None when the server does not offer it or the file is
    not one the system can send from (an S3 object's stream)."""
    if type(chunks) is not SentFile or ZERO_COPY not in environ["asgi.scope"].get("extensions", ()):
        return None
    length = _content_length(headers)
    try:
        file = chunks.file
        file.fileno()
        offset = file.tell()
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        return None
    if length is None:
        return None
    return {"type": ZERO_COPY, "file": file, "offset": offset, "count": length, "more_body": False}


def _start(status, headers):
    return {
        "type": "http.response.start",
        "status": int(status[:3]),
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers],
    }


def _body(content, more):
    return {"type": "http.response.body", "body": content, "more_body": more}


def application(app, realtime, threads):
    """The ASGI application: the socket path to `realtime`, the rest to the Flask `app`, each request
    with its body already read whole (read_body)."""

    def with_body(environ, start_response):
        body, length = environ["asgi.scope"][BODY]
        environ["wsgi.input"] = body
        if length is not None:  # a chunked body's length, once it is in, as waitress gives it
            environ["CONTENT_LENGTH"] = str(length)
            environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.file_wrapper"] = SentFile
        return app(environ, start_response)

    flask = Threads(with_body, threads)
    limits = waitress_server.limits_of(app)
    staging = files.staging_directory(app.config["STORAGE_ROOT"])
    spooler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spool")  # Spooling: in order

    async def serve(scope, receive, send):
        kind = scope["type"]
        if kind == "http":
            body = await read_body(app, limits, scope, receive, send, staging, spooler)
            if body is None:
                return None  # refused, or the client is gone
            scope[BODY] = body
            try:
                return await flask(scope, body[0], send)
            finally:
                body[0].close()
        if kind == "websocket":
            if scope["path"] == sessions.PATH:
                return await realtime.session(scope, receive, send)
            await receive()
            body = json.dumps({"message": "Not found", "code": 404, "hint": None, "details": ""}).encode()
            await send({"type": "websocket.http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            return await send({"type": "websocket.http.response.body", "body": body})
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await realtime.start()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await realtime.stop()
                    return await send({"type": "lifespan.shutdown.complete"})

    return serve


def expects_body(headers):
    """Whether a request with `headers` (ASGI's: lowercase names) has a body to come: (declared
    length or None, chunked)."""
    length, chunked = None, False
    for name, value in headers:
        if name == b"content-length":
            length = int(value)  # httptools has refused one that is not a number
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked


async def read_body(app, limits, scope, receive, send, staging, spooler):
    """The request's body, read in the event loop before any thread runs the app, as waitress reads it:
    (a file at its start, its length when it was chunked), held in memory up to SPOOL_BYTES and in a
    temporary file past that. A body sent to /storage/, but a form, goes into a files.Spool in
    `staging`, its md5 computed as it arrives (on `spooler` past a BATCH, Spooling): an upload takes
    that file as it is, neither copied nor read again. a2wsgi, which served before, ran the view as
    soon as the headers were in, and the view's read of a body that trickled in held a thread for
    as long as the body took: THREADS slow POSTs held them all. A body over the limit of its path
    (server.body_limit) is answered with the API's 413, unread: a declared one before `100 Continue`
    would ask for it. A body that stops coming is Protocol's to end. None when the request was
    answered here or its client is gone."""
    declared, chunked = expects_body(scope["headers"])
    if not declared and not chunked:
        return io.BytesIO(), None
    limit, too_large = waitress_server.body_limit(limits, scope["path"])
    if declared is not None and declared > limit:
        return await refuse(app, too_large, scope, send)
    if scope["path"].startswith("/storage/") and not _form(scope["headers"]):
        body = files.Spool(staging, SPOOL_BYTES)
        writer = Spooling(body, spooler)
    else:
        body = (
            tempfile.SpooledTemporaryFile(SPOOL_BYTES) if (declared or limit) > SPOOL_BYTES else io.BytesIO()
        )
        writer = None
    received = 0
    more = True
    try:
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                body.close()
                return None
            chunk, more = message.get("body", b""), message.get("more_body", False)
            received += len(chunk)
            if received > limit:
                body.close()
                return await refuse(app, too_large, scope, send)
            if writer is None:
                body.write(chunk)
            else:
                await writer.write(chunk, more)
        if writer is not None:
            await writer.finish()
    except BaseException:
        body.close()  # a Spool's writes still queued find it closed
        raise
    body.seek(0)
    return body, (received if chunked else None)


def _form(headers):
    """Whether the body is a multipart form: its file is spooled and hashed as the app parses it."""
    return any(name == b"content-type" and value[:10].lower() == b"multipart/" for name, value in headers)


class Spooling:
    """A Spool's chunks written (and hashed): the first BATCH bytes on the loop as they arrive, the
    rest on `spooler`, a thread of its own, a BATCH at a time and at most AHEAD batches behind the
    loop. On the loop alone, md5 and the writes made a large upload's loop three times as busy as
    receiving it (207-233 ms of its CPU for 64 MB) while the other core waited; a thread's turn
    costs more than it saves on a body of a BATCH or so, hashed between its chunks' arrivals."""

    def __init__(self, spool, spooler):
        self.spool, self.spooler = spool, spooler
        self.received = 0
        self.chunks, self.size = [], 0  # past the first BATCH: what the thread is given next
        self.pending = collections.deque()

    async def write(self, chunk, more):
        self.received += len(chunk)
        if self.received <= BATCH:
            self.spool.write(chunk)
            return
        self.chunks.append(chunk)
        self.size += len(chunk)
        if more and self.size >= BATCH:
            await self.hand_over()

    async def hand_over(self):
        chunks, self.chunks, self.size = self.chunks, [], 0
        loop = asyncio.get_running_loop()
        self.pending.append(loop.run_in_executor(self.spooler, self._write, chunks))
        if len(self.pending) > AHEAD:
            await self.pending.popleft()

    def _write(self, chunks):
        for chunk in chunks:
            self.spool.write(chunk)

    async def finish(self):
        if not self.pending:
            self._write(self.chunks)  # less than a BATCH past the first: not worth a turn
        elif self.chunks:
            await self.hand_over()
        while self.pending:
            await self.pending.popleft()


async def refuse(app, error, scope, send):
    """Answer the request in `scope` with the app's answer to the HTTP `error` (server.refusal), and
    close its connection."""
    method, path = scope["method"], waitress_server.api_root(scope["path"])
    shaping = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in scope["headers"]
        if name.decode("latin-1").upper().replace("-", "_") in waitress_server.SHAPING_HEADERS
    ]
    status, headers, body = waitress_server.refusal(app, error, method, path, shaping)
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    await send({"type": "http.response.start", "status": int(status.split(" ", 1)[0]),
                "headers": [*headers, (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _answered_upgrades(record):
    """uvicorn calls an upgrade answered with an HTTP error (a missing API key: the 401) a handshake
    never completed, at ERROR; it was answered as meant."""
    return not str(record.msg).startswith("ASGI callable returned without completing handshake")


class Server(uvicorn.Server):
    """uvicorn with our stop flag instead of its own signal handling, and the sockets closed with
    1001 before it closes connections itself (with 1012)."""

    def __init__(self, config, realtime, stop):
        super().__init__(config)
        self.realtime, self.stop = realtime, stop

    @contextlib.contextmanager
    def capture_signals(self):
        yield  # serve() installs the handlers, and nothing is raised again after the drain

    async def on_tick(self, counter):
        if self.stop.is_set():
            log.info(
                "stopping: sockets closed with 1001, no new connections, finishing the requests in flight"
            )
            await self.realtime.stop()
            deadline = time.monotonic() + CLOSE_SECONDS
            while self.realtime.hub.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return True
        return await super().on_tick(counter)


class Cycle(RequestResponseCycle):
    """uvicorn's request and its answer, with ASGI's zero-copy send (ZERO_COPY): the file's bytes go
    from the page cache to the socket by the kernel (loop.sendfile), never read into Python nor
    copied through the transport's buffer, which cost a 1 MB download more CPU than all the rest
    of its request."""

    async def send(self, message):
        if message["type"] != ZERO_COPY:
            return await super().send(message)
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        count = message["count"]
        if not self.response_started or self.response_complete or self.chunked_encoding:
            raise RuntimeError(f"Unexpected ASGI message '{ZERO_COPY}' here")
        if count > self.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        file, offset = message["file"], message.get("offset", 0)
        try:
            sent = self.send_at_once(file, offset, count)
            if sent < count:
                loop = asyncio.get_running_loop()
                sent += await loop.sendfile(self.transport, file, offset + sent, count - sent)
        except OSError:  # the client hung up (a reset, a broken pipe)
            return self.gone()
        except RuntimeError:
            if self.transport.is_closing():  # closed before the file could be sent
                return self.gone()
            raise
        self.expected_content_length -= sent  # a file shorter than said fails the check below
        await super().send(_body(b"", more=message.get("more_body", False)))

    def send_at_once(self, file, offset, count):
        """What the socket takes of the file at once, with nothing queued before it on a plain TCP
        transport: loop.sendfile pauses reading, waits for the transport's buffer and resumes
        reading even when one call sends it all, which cost more than the send."""
        transport = self.transport
        if transport.get_write_buffer_size() or transport.get_extra_info("sslcontext") is not None:
            return 0
        try:
            return os.sendfile(transport.get_extra_info("socket").fileno(), file.fileno(), offset, count)
        except BlockingIOError:
            return 0

    def gone(self):
        self.disconnected = True
        self.transport.close()


class Protocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 (httptools), bounded as server.py bounds waitress: a request's line and
    headers must be in within HEADER_SECONDS (of the connection's opening for its first request,
    of its first byte for the next ones) and within MAX_HEADER_BYTES, or the connection is closed;
    uvicorn had neither limit, so a client trickling its headers, or one that opens a connection
    and sends nothing, held it for ever. A request it cannot parse is answered by the app in the
    API's JSON error body (server.refusal), not in uvicorn's text/plain. A request's body must keep
    coming: nothing of it for CHANNEL_TIMEOUT and the connection is closed, as waitress closes one
    silent that long (read_body reads it in the loop, so no thread waits on it). `flask` is the app."""

    flask = None
    head_timer = None
    head = b""  # the first bytes of the request being received, to find its path if refused
    head_bytes = 0  # what has come of the line and headers (and maybe a body's start) so far
    head_size = 0  # the line's and headers' own size, as parsed
    refused = False
    body_timer = None  # while a request's body is arriving: closes the connection once it stalls
    body_at = 0.0  # loop.time() of the body's last byte (or of its headers' end)

    def connection_made(self, transport):
        super().connection_made(transport)
        self.arm()

    def _start_asgi_task(self, cycle, app):
        # uvicorn makes its RequestResponseCycle by name: the request's own is made a Cycle here,
        # before its task runs, and its scope says that it offers ZERO_COPY.
        cycle.__class__ = Cycle
        cycle.scope.setdefault("extensions", {})[ZERO_COPY] = {}
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc):
        self.disarm()
        self.body_done()
        super().connection_lost(exc)

    def arm(self):
        if self.head_timer is None:
            self.head, self.head_bytes, self.head_size = b"", 0, 0
            self.head_timer = self.loop.call_later(waitress_server.HEADER_SECONDS, self.head_late)

    def disarm(self):
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_late(self):
        self.head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data):
        if self.refused:
            return
        receiving_head = self.head_timer is not None
        if receiving_head:
            self.head += data[: waitress_server.REQUEST_LINE_BYTES - len(self.head)]
            self.head_bytes += len(data)
        super().data_received(data)
        if receiving_head and self.head_timer is not None and self.head_bytes > MAX_HEADER_BYTES:
            self.too_large()  # and still not all in

    def too_large(self):
        self.disarm()
        self.refused = True
        self.refuse(
            RequestHeaderFieldsTooLarge(f"The request's headers exceed the limit of {MAX_HEADER_BYTES} bytes")
        )

    def on_message_begin(self):
        super().on_message_begin()
        self.arm()

    def on_url(self, url):
        self.head_size += len(url)
        super().on_url(url)

    def on_header(self, name, value):
        self.head_size += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self):
        self.disarm()
        if self.head_size > MAX_HEADER_BYTES:
            return self.too_large()
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self.body_at = self.loop.time()
            self.body_timer = self.loop.call_at(
                self.body_at + waitress_server.CHANNEL_TIMEOUT, self.body_late
            )

    def body_late(self):
        self.body_timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:  # the app is not taking the body yet (a request pipelined behind)
            self.body_at = now
        if now < self.body_at + waitress_server.CHANNEL_TIMEOUT:
            self.body_timer = self.loop.call_at(
                self.body_at + waitress_server.CHANNEL_TIMEOUT, self.body_late
            )
        else:
            self.transport.close()  # read_body sees the client gone; no thread was ever given it

    def on_body(self, body):
        if not self.refused:
            self.body_at = self.loop.time()
            super().on_body(body)

    def on_message_complete(self):
        self.body_done()
        if not self.refused:
            super().on_message_complete()

    def body_done(self):
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def send_400_response(self, msg):
        self.disarm()
        self.refuse(BadRequest(f"Malformed HTTP request: {msg}"))

    def refuse(self, error):
        method, path = waitress_server.requested(self.head)
        shaping = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self.headers or ()
            if name.decode("latin-1").upper().replace("-", "_") in waitress_server.SHAPING_HEADERS
        ]
        status, headers, body = waitress_server.refusal(self.flask, error, method, path, shaping)
        head = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers), "connection: close"]
        self.transport.write("\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + body)
        self.transport.close()


def make_server(app, realtime, host, port, threads, stop, sockets=None):
    waitress_server._allow_open_files(MAX_SOCKETS)
    # uvicorn logs each socket's request line, ?apikey= and all, at INFO: a service_role key would be
    # in the log. The app logs its own requests without keys (runtime/logs.py).
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").addFilter(_answered_upgrades)
    app.config["REALTIME_SERVED"] = True  # a plain GET of the socket's path is then a 400, not a 501
    config = uvicorn.Config(
        application(app, realtime, threads),
        host=host or "127.0.0.1",
        port=port or 0,
        loop="asyncio",
        http=type("Protocol", (Protocol,), {"flask": app}),
        ws="websockets-sansio",
        ws_max_size=app.config["REALTIME_MAX_MESSAGE"],
        ws_per_message_deflate=False,  # a compressor per socket costs memory; the frames are small
        lifespan="on",
        log_config=None,  # minibase's own logging stays as it is
        access_log=False,  # the app logs every request itself
        proxy_headers=False,  # X-Forwarded-For is the app's to believe (TRUSTED_PROXIES), not the server's
        server_header=False,
        timeout_keep_alive=waitress_server.CHANNEL_TIMEOUT,
        timeout_graceful_shutdown=waitress_server.DRAIN_SECONDS,
        backlog=1024,
    )
    running = Server(config, realtime, stop)
    running.sockets = sockets
    return running


def serve(running):
    """Run `running` (make_server) until its stop flag is set; True when it ran and stopped cleanly."""
    asyncio.run(running.serve(sockets=running.sockets))
    log.info("stopped")
    return running.started


def stop_on_signals():
    """A stop flag set by SIGTERM and SIGINT."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
