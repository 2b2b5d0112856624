"""The seam to uvicorn: everything minibase takes from it beyond its documented Config and Server,
here and nowhere else, each private attribute named in RELIES_ON (tests/test_uvicorn_seam.py
fails, naming it, when a new uvicorn changes one; requirements.txt pins the version tested).

- Protocol: uvicorn's HTTP/1.1 (httptools) bounded as waitress is (runtime/server.py): the time and
  bytes a request's line and headers may take, a body that must keep coming, and a request it
  cannot parse answered in the API's JSON.
- Cycle: a request's answer with ASGI's zero-copy send (sendfile(2)), and a short one written in
  one write (WHOLE).
- Server: uvicorn's server stopped by our flag, the Realtime sockets closed with 1001 first; under
  WORKERS, taking connections only while the worker holds its share.
- WebSocket: uvicorn's sans-I/O WebSocket protocol with one more ASGI extension (WIRE): a frame the
  app framed itself (live.protocol.wire), written to the socket at once when nothing else is
  waiting to be; a broadcast is framed once for a thousand sockets, not once per socket.
- make_server: the documented Config, with a connection limit (limit_concurrency)."""

import asyncio
import contextlib
import logging
import os
import time

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State
from werkzeug.exceptions import BadRequest, RequestHeaderFieldsTooLarge

from runtime import server as waitress_server

log = logging.getLogger("minibase")
CLOSE_SECONDS = 3  # how long the sockets have to take their 1001 before the listener closes
MAX_HEADER_BYTES = 256 * 1024  # a request's line and headers, as waitress's limit
ZERO_COPY = "http.response.zerocopysend"  # ASGI's extension: a file sent with sendfile(2) (Cycle)
WHOLE = "minibase.http.response.whole"  # our own: a response's start and whole body in one write
# Connections (sockets and HTTP alike) uvicorn holds at once; past it, a new request is answered 503
# (its documented limit_concurrency, which counts connections and requests in flight). It leaves
# room below the open files the process asks for (asgi.MAX_SOCKETS) for the database and files.
CONNECTION_LIMIT = 9000
# What uvicorn logs of an upgrade answered with an HTTP error (Server's filter): its own words.
UNFINISHED_HANDSHAKE = "ASGI callable returned without completing handshake"
SHARE_PAUSE = 0.001  # how often a worker holding more than its share looks again, while a
# connection waits to be taken (epoll's timeouts are whole milliseconds)

# What is used of uvicorn that it does not document, by the class that has it: methods overridden
# or called, and attributes read or set.
RELIES_ON = {
    "HttpToolsProtocol": {
        "methods": ("connection_made", "connection_lost", "data_received", "on_message_begin", "on_url",
                    "on_header", "on_headers_complete", "on_body", "on_message_complete",
                    "send_400_response", "_start_asgi_task", "_should_upgrade"),
        "attributes": ("loop", "transport", "parser", "flow", "headers"),
    },
    "RequestResponseCycle": {
        "methods": ("send",),
        "attributes": ("scope", "transport", "flow", "disconnected", "response_started",
                       "response_complete", "chunked_encoding", "expected_content_length"),
    },
    "FlowControl": {"methods": ("drain",), "attributes": ("read_paused", "write_paused")},
    "Server": {"methods": ("capture_signals", "on_tick", "serve", "startup", "shutdown"),
               "attributes": ("started", "server_state", "lifespan", "config")},
    "WebSocketsSansIOProtocol": {
        "methods": ("handle_connect",),
        "attributes": ("scope", "conn", "transport", "handshake_complete", "close_sent", "initial_response",
                       "writable"),
    },
}  # fmt: skip
# The attributes minibase's subclasses add: none may be one uvicorn's own classes use.
ADDED = {
    "HttpToolsProtocol": ("flask", "head_timer", "head", "head_bytes", "head_size", "refused", "body_timer",
                          "body_at", "arm", "disarm", "head_late", "too_large", "body_late", "body_done",
                          "refuse"),
    "RequestResponseCycle": ("send_at_once", "gone", "send_whole"),
    "Server": ("realtime", "stop", "sockets", "share", "accepting", "accept", "resting", "rest",
               "accepting_ended"),
    "WebSocketsSansIOProtocol": ("write_wire",),
}  # fmt: skip
WIRE = "minibase.websocket.wire"  # the ASGI extension of WebSocket: {"write": write_wire}


def _answered_upgrades(record):
    """uvicorn calls an upgrade answered with an HTTP error (a missing API key: the 401) a handshake
    never completed, at ERROR; it was answered as meant."""
    return not str(record.msg).startswith(UNFINISHED_HANDSHAKE)


async def _readable(loop, listener):
    """Return once `listener` has a connection waiting to be accepted."""
    ready = loop.create_future()
    fd = listener.fileno()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


class Server(uvicorn.Server):
    """uvicorn with our stop flag instead of its own signal handling, and the sockets closed with
    1001 before it closes connections itself (with 1012)."""

    def __init__(self, config, realtime, stop, share=None):
        super().__init__(config)
        self.realtime, self.stop = realtime, stop
        # Under WORKERS, share(connections held) says whether this worker may take one more
        # (workers.Balance); uvicorn's own accepting, left to the kernel, is not used.
        self.share, self.accepting = share, []
        self.resting = False  # out of open files, say: its count unpublished until accept(2) works

    async def startup(self, sockets=None):
        if self.share is None or not sockets:
            return await super().startup(sockets=sockets)
        await super().startup(sockets=[])
        self.accepting = [asyncio.create_task(self.accept(listener)) for listener in sockets]
        for task in self.accepting:
            task.add_done_callback(self.accepting_ended)

    def accepting_ended(self, task):
        """A worker whose accepting ended by an error drains and exits, and its parent starts
        another: left serving, it would publish ever fewer connections and hold the other workers
        back from every new one."""
        if not task.cancelled() and task.exception() is not None:
            log.error("accepting connections failed: this worker stops", exc_info=task.exception())
            self.stop.set()

    async def accept(self, listener):
        """Take connections from the `listener` the workers share, only while this worker holds
        its share of them. asyncio's own server takes every connection waiting each time the
        listener is ready: the first worker to wake took 15 of a load test's 16 and served them on
        one core while the other idled. Held back, a worker waits for a connection to come, then
        looks again every SHARE_PAUSE while it waits: a fixed 5 ms sleep between looks, waiting or
        not, woke it 200 times a second, and cost a client that opens a connection for each
        request a quarter of its reads (docs/deployment.md)."""
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        connections = self.server_state.connections

        def protocol():
            return self.config.http_protocol_class(
                config=self.config, server_state=self.server_state, app_state=self.lifespan.state
            )

        while True:
            await _readable(loop, listener)  # a connection waits in the kernel's queue
            # take those waiting while this worker may (a resting one tries again unpublished)
            while self.resting or self.share(len(connections)):
                try:
                    connection, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    self.resting = False  # the kernel found a descriptor: it looks before the queue
                    break  # none is waiting (another worker took it)
                except ConnectionAbortedError:
                    continue  # its client gave up waiting
                except OSError as exc:
                    if exc.errno in waitress_server.SHORT_OF:
                        log.warning("accepting a connection failed (%s); trying again in a second", exc)
                        await self.rest()
                    else:  # that connection's own failure (EPROTO, EPERM from a firewall)
                        log.warning("accepting a connection failed (%s)", exc)
                    break  # to the loop, which had no turn while this one accepted
                self.resting = False
                connection.setblocking(False)
                try:
                    await loop.connect_accepted_socket(protocol, connection)
                except OSError:  # reset before it was served
                    connection.close()
                except BaseException:  # cancelled, or no protocol could be made: accepting ends
                    connection.close()
                    raise
            else:  # this worker holds more than its share: one holding fewer takes it meanwhile
                await asyncio.sleep(SHARE_PAUSE)

    async def rest(self):
        """Pause accepting for server.REST_SECONDS, as waitress's Server does. Until accept(2)
        finds a descriptor again, this worker's count is not published: once it is stale
        (workers.STALE_SECONDS) the others take the connections it cannot, rather than hold back
        for a worker that publishes few and takes none."""
        self.resting = True
        await asyncio.sleep(waitress_server.REST_SECONDS)

    async def shutdown(self, sockets=None):
        for task in self.accepting:
            task.cancel()
        # Their readers are removed before the listener is closed: closed first, the descriptor is
        # gone but the other workers' copies keep the socket in this loop's epoll, which then
        # reported every connection waiting, to no reader, in a loop through the drain.
        await asyncio.gather(*self.accepting, return_exceptions=True)
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self):
        yield  # serve() installs the handlers, and nothing is raised again after the drain

    async def on_tick(self, counter):
        if self.share is not None and not self.resting:
            self.share(len(self.server_state.connections))  # published, when no connection comes either
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
        if message["type"] == WHOLE:
            return await self.send_whole(message["start"], message["body"])
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
        await super().send(
            {"type": "http.response.body", "body": b"", "more_body": message.get("more_body", False)}
        )

    async def send_whole(self, start, body):
        """A response's start and its whole body (WHOLE) as uvicorn sends them, but written to the
        socket in one write. uvicorn writes the headers and the body apart: two send(2) calls and two
        TCP segments a response (with Threads' direct answer, the read by key 3-6% more a second,
        the loop's CPU a request 10% less: docs/deployment.md)."""
        transport = self.transport
        self.transport = collected = OneWrite(transport)
        try:
            await super().send(start)
            await super().send({"type": "http.response.body", "body": body})
        finally:
            self.transport = transport
            collected.flush()

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


class OneWrite:
    """A transport's stand-in while Cycle.send_whole sends a response: what is written is kept and
    written at once, before anything else is asked of the transport (closing it, say)."""

    def __init__(self, transport):
        self.transport, self.parts = transport, []

    def write(self, data):
        self.parts.append(data)

    def flush(self):
        if self.parts:
            data = b"".join(self.parts)
            self.parts = []
            self.transport.write(data)

    def close(self):
        self.flush()
        self.transport.close()

    def __getattr__(self, name):
        self.flush()
        return getattr(self.transport, name)


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
        # before its task runs, and its scope says that it offers ZERO_COPY and WHOLE.
        cycle.__class__ = Cycle
        cycle.scope.setdefault("extensions", {})[ZERO_COPY] = {}
        cycle.scope["extensions"][WHOLE] = {}
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


class WebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, whose scope offers the app WIRE: write_wire."""

    def handle_connect(self, event):
        super().handle_connect(event)
        if getattr(self, "scope", None) is not None and not self.close_sent:  # no scope: refused
            self.scope["extensions"][WIRE] = {"write": self.write_wire}

    def write_wire(self, data):
        """Write `data`, whole WebSocket frames, now; False (nothing written) when the socket is not
        open, or its buffer is full (the app queues the frame and sends it as any other)."""
        if (
            not self.handshake_complete
            or self.close_sent
            or self.initial_response is not None
            or not self.writable.is_set()
            or self.conn.state is not State.OPEN
            or self.transport.is_closing()
        ):
            return False
        self.transport.write(data)
        return True


def make_server(application, app, realtime, host, port, stop, sockets=None, share=None):
    """uvicorn serving the ASGI `application` (asgi.application) of the Flask `app` on `host`:`port`,
    or on `sockets`, until `stop` is set; `share` as Server's."""
    # uvicorn logs each socket's request line, ?apikey= and all, at INFO: a service_role key would be
    # in the log. The app logs its own requests without keys (runtime/logs.py).
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").addFilter(_answered_upgrades)
    config = uvicorn.Config(
        application,
        host=host or "127.0.0.1",
        port=port or 0,
        loop="asyncio",
        http=type("Protocol", (Protocol,), {"flask": app}),
        ws=WebSocket,
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
        limit_concurrency=CONNECTION_LIMIT,
    )
    running = Server(config, realtime, stop, share)
    running.sockets = sockets
    return running


def run(running):
    """Run `running` (make_server) until its stop flag is set; True when it ran and stopped cleanly."""
    asyncio.run(running.serve(sockets=running.sockets))
    log.info("stopped")
    return running.started
