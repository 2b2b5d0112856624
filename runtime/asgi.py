"""Serving with Realtime on (REALTIME, the default under `python wsgi.py`): waitress cannot hold a
WebSocket, so uvicorn serves the port. Its websockets protocol (the `websockets` library) carries
/realtime/v1/websocket to the Realtime server (realtime/sessions.py); every other request goes to
the Flask app unchanged, on a pool of threads (a2wsgi), as waitress runs it.

SIGTERM or SIGINT: every socket is closed with 1001 (going away), then uvicorn stops accepting,
lets the requests in flight finish (up to DRAIN_SECONDS) and returns."""

import asyncio
import contextlib
import json
import logging
import signal
import threading
import time

import uvicorn
from a2wsgi import WSGIMiddleware
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from werkzeug.exceptions import BadRequest, RequestHeaderFieldsTooLarge

from live import sessions
from runtime import server as waitress_server

log = logging.getLogger("minibase")
CLOSE_SECONDS = 3  # how long the sockets have to take their 1001 before the listener closes
MAX_SOCKETS = 10000  # open files the process asks for: thousands of idle sockets are the use
MAX_HEADER_BYTES = 256 * 1024  # a request's line and headers, as waitress's limit


def application(app, realtime, threads):
    """The ASGI application: the socket path to `realtime`, the rest to the Flask `app`."""

    def whole_body(environ, start_response):
        # a2wsgi's input ends where the request's body does, chunked or not, as waitress's does; without
        # saying so, werkzeug reads a body that has no Content-Length as empty (a chunked upload: 0 bytes).
        environ["wsgi.input_terminated"] = True
        return app(environ, start_response)

    flask = WSGIMiddleware(whole_body, workers=threads)

    async def serve(scope, receive, send):
        kind = scope["type"]
        if kind == "http":
            return await flask(scope, receive, send)
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


class Protocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 (httptools), bounded as server.py bounds waitress: a request's line and
    headers must be in within HEADER_SECONDS (of the connection's opening for its first request,
    of its first byte for the next ones) and within MAX_HEADER_BYTES, or the connection is closed;
    uvicorn had neither limit, so a client trickling its headers, or one that opens a connection
    and sends nothing, held it for ever. A request it cannot parse is answered by the app in the
    API's JSON error body (server.refusal), not in uvicorn's text/plain. `flask` is the app."""

    flask = None
    head_timer = None
    head = b""  # the first bytes of the request being received, to find its path if refused
    head_bytes = 0  # what has come of the line and headers (and maybe a body's start) so far
    head_size = 0  # the line's and headers' own size, as parsed
    refused = False

    def connection_made(self, transport):
        super().connection_made(transport)
        self.arm()

    def connection_lost(self, exc):
        self.disarm()
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

    def on_body(self, body):
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self):
        if not self.refused:
            super().on_message_complete()

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
