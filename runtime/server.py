"""Serving the app with waitress: connection limits and timeouts so idle or slow clients cannot take
the service offline, and a drain on SIGTERM and SIGINT: the listener closes, requests in flight
finish and are answered (up to DRAIN_SECONDS), then serve() returns and the process exits 0."""

import logging
import resource
import signal
import threading
import time

from waitress import wasyncore
from waitress.server import create_server

log = logging.getLogger("minibase")

CONNECTION_LIMIT = 1000  # open sockets; waitress's default (100) is taken by a hundred idle clients
CHANNEL_TIMEOUT = 20  # seconds a connection may sit idle or half-sent before it is closed
CLEANUP_INTERVAL = 5  # seconds between looks for such connections
DRAIN_SECONDS = 30
POLL_SECONDS = 0.5  # how long the loop waits for a socket before it looks at the stop flag again


def _allow_open_files(needed):
    """Raise the soft limit on open files to `needed` where the hard limit allows: every connection
    is a file, and the usual soft limit (1024) is near the connection limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def make_server(app, host, port, threads, sockets=None):
    """A waitress server bound to host:port, or accepting on `sockets` already listening."""
    proxies = _trusted_proxies(app.config.get("TRUSTED_PROXIES", 0))
    _allow_open_files(CONNECTION_LIMIT + 100)
    # Under load waitress logs a warning for every queued request; the request log says enough.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    where = {"sockets": sockets} if sockets else {"host": host, "port": port}
    return create_server(
        app,
        **where,
        threads=threads,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=CHANNEL_TIMEOUT,
        cleanup_interval=CLEANUP_INTERVAL,
        ident="minibase",
        # waitress buffers a body before the app sees it: past the largest upload (and its form), stop.
        max_request_body_size=app.config["STORAGE_FILE_SIZE_LIMIT"] + 1024 * 1024,
        **proxies,
    )


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
