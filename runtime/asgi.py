"""Serving with Realtime on (REALTIME, the default under `python wsgi.py`): waitress cannot hold a
WebSocket, so uvicorn serves the port (runtime/uvicorn_seam.py, the one module that knows uvicorn).
Its websockets protocol (the `websockets` library) carries /realtime/v1/websocket to the Realtime
server (live/sessions.py); every other request goes to the Flask app unchanged, its body read first
(read_body), on a pool of threads (Threads), as waitress runs it.

SIGTERM or SIGINT: every socket is closed with 1001 (going away), then uvicorn stops accepting,
lets the requests in flight finish (up to DRAIN_SECONDS) and returns."""

import asyncio
import collections
import contextvars
import io
import json
import logging
import signal
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from a2wsgi.wsgi import build_environ
from werkzeug.exceptions import ServiceUnavailable
from werkzeug.wsgi import FileWrapper

from live import sessions
from runtime import server as waitress_server
from runtime import uvicorn_seam
from runtime.uvicorn_seam import WHOLE, ZERO_COPY
from storage import files

log = logging.getLogger("minibase")
MAX_SOCKETS = 10000  # open files the process asks for: thousands of idle sockets are the use
SPOOL_BYTES = 512 * 1024  # a request body past this is kept in a temporary file (waitress's inbuf_overflow)
BATCH = 1024 * 1024  # a storage body's bytes handed to the spooling thread at a time (Spooling)
AHEAD = 4  # batches the loop may receive ahead of that thread
BODY = "minibase.body"  # the scope's key for the request's body, read whole (read_body)
# Requests that may wait for a thread, past those running; waitress's queue is bounded by its 1,000
# connections (server.CONNECTION_LIMIT), uvicorn's would be by its 9,000 (uvicorn_seam), too many.
QUEUE_LIMIT = 1000
BUSY = ServiceUnavailable(
    "The server is busy: too many requests are waiting. Try again shortly.", retry_after=1
)


FILE_BLOCK = 256 * 1024  # a download's bytes per hand-over from the app's thread to the event loop
WHOLE_BYTES = 256 * 1024  # a response up to this long (its Content-Length) is sent in one hand-over


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
    gateway twice the CPU it costs under waitress). A response whose length is known and at most
    WHOLE_BYTES, or that has no body (HEAD, 204, 304), is made whole on the thread and comes back
    with the thread's return: one hand-over; it is written to the socket headers and body at once
    (WHOLE), one segment rather than two. A whole file (a download, SentFile) goes with its headers
    in one hand-over too, sent by the loop with sendfile(2) while the thread waits, then closed. Any
    other (a range of a file, a streamed export) is sent as it is produced, a block a hand-over,
    the headers with the first block."""

    def __init__(self, app, threads, queue=QUEUE_LIMIT):
        self.app = app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="WSGI")
        self.bound = threads + queue  # requests running or waiting for a thread
        self.admitted = 0  # counted on the event loop's thread alone: no lock

    def full(self):
        """Whether `queue` requests wait for a thread already: the next is refused, not queued."""
        return self.admitted >= self.bound

    async def __call__(self, scope, body, send):
        loop = asyncio.get_running_loop()
        environ = build_environ(scope, body)
        run = contextvars.copy_context().run
        self.admitted += 1
        try:
            answer = loop.create_future()
            work = self.executor.submit(self.answer, answer, run, environ, loop, send)
            try:
                whole = await answer
            except asyncio.CancelledError:
                work.cancel()  # not run if it has not started, as run_in_executor's
                raise
        finally:
            self.admitted -= 1
        if whole is not None:
            start, content = whole
            if WHOLE in scope.get("extensions", ()):
                return await send({"type": WHOLE, "start": start, "body": content})
            await send(start)
            await send({"type": "http.response.body", "body": content})

    def answer(self, answer, run, environ, loop, send):
        """On a thread of the pool: respond, and settle the loop's `answer` with what came of it.
        run_in_executor did this through a second future, chained to the pool's by callbacks on
        both threads: a sixth of the loop's samples holding the GIL under wrk (py-spy)."""
        try:
            outcome = (run(self.respond, environ, loop, send), None)
        except BaseException as exc:  # as the pool's own future takes it, to be raised in the loop
            outcome = (None, exc)
        try:
            loop.call_soon_threadsafe(_settle, answer, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits for the answer any more
            pass

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


def _settle(answer, result, error):
    if answer.done():  # cancelled while the thread ran
        return
    if error is None:
        answer.set_result(result)
    else:
        answer.set_exception(error)


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


def application(app, realtime, threads, queue=QUEUE_LIMIT):
    """The ASGI application: the socket path to `realtime`, the rest to the Flask `app`, each request
    with its body already read whole (read_body), on `threads` threads; a request that finds `queue`
    others waiting for one is answered 503 at once (Retry-After: 1) and its connection closed."""
    in_turns = waitress_server.in_turns(app)

    def with_body(environ, start_response):
        body, length = environ["asgi.scope"][BODY]
        environ["wsgi.input"] = body
        if isinstance(body, files.Spool):  # announced to the app, which takes it as the upload's file
            environ[files.SPOOLED] = body
        if length is not None:  # a chunked body's length, once it is in, as waitress gives it
            environ["CONTENT_LENGTH"] = str(length)
            environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.file_wrapper"] = SentFile
        return in_turns(environ, start_response)

    flask = Threads(with_body, threads, queue)
    limits = waitress_server.limits_of(app)
    staging = files.staging_directory(app.config["STORAGE_ROOT"])
    spooler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spool")  # Spooling: in order

    async def serve(scope, receive, send):
        kind = scope["type"]
        if kind == "http":
            if flask.full():
                return await refuse(app, BUSY, scope, send)
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


def make_server(app, realtime, host, port, threads, stop, sockets=None, queue=QUEUE_LIMIT, share=None):
    """uvicorn (runtime/uvicorn_seam.py) serving `app` and `realtime` until `stop` is set; under
    WORKERS, `share(connections held)` says whether this worker may take another."""
    waitress_server._allow_open_files(MAX_SOCKETS)
    app.config["REALTIME_SERVED"] = True  # a plain GET of the socket's path is then a 400, not a 501
    served = application(app, realtime, threads, queue)
    return uvicorn_seam.make_server(served, app, realtime, host, port, stop, sockets, share)


def serve(running):
    """Run `running` (make_server) until its stop flag is set; True when it ran and stopped cleanly."""
    return uvicorn_seam.run(running)


def stop_on_signals():
    """A stop flag set by SIGTERM and SIGINT."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
