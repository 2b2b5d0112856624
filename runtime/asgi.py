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

from live import sessions
from runtime import server as waitress_server

log = logging.getLogger("minibase")
CLOSE_SECONDS = 3  # how long the sockets have to take their 1001 before the listener closes
MAX_SOCKETS = 10000  # open files the process asks for: thousands of idle sockets are the use


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
        http="httptools",
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
