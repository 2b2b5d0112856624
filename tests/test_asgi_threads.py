"""runtime.asgi.Threads: how a request reaches the Flask app's threads under uvicorn and how its
answer comes back to the event loop: whole in one hand-over when it is short, block by block as it
is produced when it is not."""

import asyncio
import contextvars
import threading
import time

import pytest
import requests

from runtime import asgi
from support import serve_with_realtime

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
         "query_string": b"", "root_path": "", "client": ("127.0.0.1", 4000),
         "server": ("127.0.0.1", 80), "headers": [(b"host", b"127.0.0.1")]}  # fmt: skip


def call(serve, method="GET", path="/", on_send=None, headers=()):
    """The messages `serve` (an ASGI app taking scope, receive, send) sends for one request, each with
    the name of the thread that sent it, run in a loop on a thread of its own."""
    sent = []
    scope = {**SCOPE, "method": method, "path": path, "raw_path": path.encode(),
             "headers": [*SCOPE["headers"], *headers]}  # fmt: skip

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append((message, threading.current_thread().name))
        if on_send is not None:
            on_send(message)

    errors = []

    def run():
        try:
            asyncio.run(serve(scope, receive, send))
        except Exception as exc:  # the test asserts on it
            errors.append(exc)

    thread = threading.Thread(target=run, name="loop")
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the request never finished"
    if errors:
        raise errors[0]
    return sent


def threads_serving(wsgi_app, threads=2):
    pool = asgi.Threads(wsgi_app, threads)

    async def serve(scope, receive, send):
        return await pool(scope, asgi.io.BytesIO(), send)

    return serve


def test_a_json_answer_comes_back_whole_in_one_message(app, service_key):
    """A table read under uvicorn: the headers, then the whole body in one message that ends it,
    both sent by the loop once the app's thread is done, none by the app's thread."""
    serve = asgi.application(app, None, 2)
    sent = call(serve, path="/rest/v1/", headers=[(b"apikey", service_key.encode())])
    (start, _), (body, sender) = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert body == {"type": "http.response.body", "body": body["body"]} and body["body"].startswith(b"{")
    length = dict(start["headers"])[b"content-length"]
    assert int(length) == len(body["body"])
    assert sender == "loop"


def test_a_response_without_a_length_is_sent_as_it_is_produced():
    """A streamed answer (no Content-Length): its first block reaches the loop while the app is still
    producing the next, the headers with it; every block arrives, in order, and an empty one ends it."""
    first_sent = threading.Event()

    def on_send(message):
        if message.get("body") == b"one":
            first_sent.set()

    def blocks():
        yield b"one"
        assert first_sent.wait(10), "the first block was held back until the end"
        yield b""
        yield b"two"
        yield b"three"

    def streaming(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return blocks()

    sent = [message for message, _ in call(threads_serving(streaming), on_send=on_send)]
    assert [m["type"] for m in sent] == ["http.response.start", *["http.response.body"] * 4]
    assert [m["body"] for m in sent[1:]] == [b"one", b"two", b"three", b""]
    assert [m["more_body"] for m in sent[1:]] == [True, True, True, False]


def test_a_long_response_is_streamed_even_with_its_length():
    payload = b"x" * (asgi.WHOLE_BYTES + 1)

    def long(environ, start_response):
        start_response("200 OK", [("Content-Length", str(len(payload)))])
        return iter([payload[:10], payload[10:]])

    sent = [message for message, _ in call(threads_serving(long))]
    assert [len(m["body"]) for m in sent[1:]] == [10, len(payload) - 10, 0]


@pytest.mark.parametrize(("method", "status"), [("HEAD", "200 OK"), ("GET", "204 No Content")])
def test_a_bodiless_answer_is_one_empty_message(method, status):
    def empty(environ, start_response):
        start_response(status, [("X-Seen", environ["REQUEST_METHOD"])])
        return []

    sent = [message for message, _ in call(threads_serving(empty), method=method)]
    assert sent[0]["status"] == int(status[:3]) and (b"x-seen", method.encode()) in sent[0]["headers"]
    assert sent[1:] == [{"type": "http.response.body", "body": b""}]


def test_each_request_has_its_own_context_on_a_reused_thread():
    """What one request sets in a ContextVar (a request's database deadline, say) is not seen by the
    next request on the same thread of the pool."""
    seen = contextvars.ContextVar("seen", default="unset")
    answers = []

    def app(environ, start_response):
        answers.append(seen.get())
        seen.set(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Length", "0")])
        return []

    pool = asgi.Threads(app, 1)

    async def two_requests(scope, receive, send):
        for path in ("/first", "/second"):
            await pool({**scope, "path": path}, asgi.io.BytesIO(), send)

    call(two_requests)
    assert answers == ["unset", "unset"]


def test_an_error_after_the_headers_went_out_ends_the_request_with_it():
    """PEP 3333: start_response with exc_info once the headers are sent raises the error again, and
    the app's error reaches uvicorn, which closes the connection."""

    def failing(environ, start_response):
        start_response("200 OK", [])
        yield b"part"
        yield b"more"
        try:
            raise ValueError("broken half-way")
        except ValueError as exc:
            start_response("500 Internal Server Error", [], (type(exc), exc, exc.__traceback__))

    with pytest.raises(ValueError, match="broken half-way"):
        call(threads_serving(failing))


def test_requests_past_the_queue_are_answered_503_at_once(make_app):
    """Under uvicorn, as waitress's connection limit bounds its queue: with the one thread busy and
    no room to wait (queue=0), the next request is answered 503 at once in the API's JSON with
    Retry-After, and its connection closed; once the thread is free, requests are served again."""
    app = make_app()
    entered, release = threading.Event(), threading.Event()

    @app.get("/test/hold")
    def hold():
        entered.set()
        release.wait(timeout=30)
        return {"held": True}

    port, stop = serve_with_realtime(app, threads=1, queue=0)
    base = f"http://127.0.0.1:{port}"
    held = []
    holding = threading.Thread(target=lambda: held.append(requests.get(f"{base}/test/hold", timeout=30)))
    try:
        holding.start()
        assert entered.wait(timeout=30)
        started = time.monotonic()
        refused = requests.get(f"{base}/health", timeout=30)
        assert time.monotonic() - started < 5  # answered, not queued behind the held request
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused.headers["Connection"] == "close" and "busy" in refused.json()["message"]
        release.set()
        holding.join(timeout=30)
        assert held[0].status_code == 200 and held[0].json() == {"held": True}
        assert requests.get(f"{base}/health", timeout=30).status_code == 200
    finally:
        release.set()
        stop()


def test_the_queue_bound_counts_the_running_and_the_waiting():
    pool = asgi.Threads(lambda environ, start_response: [], threads=2, queue=3)
    pool.admitted = 4
    assert not pool.full()
    pool.admitted = 5
    assert pool.full()


def test_a_request_cancelled_while_it_waits_for_a_thread_never_runs():
    """As run_in_executor's: a request whose task is cancelled (uvicorn's at the end of a drain) while
    it waits for a thread is taken off the pool's queue; one already running finishes, and its
    answer is dropped."""
    entered, release, ran = threading.Event(), threading.Event(), []

    def app(environ, start_response):
        ran.append(environ["PATH_INFO"])
        if environ["PATH_INFO"] == "/held":
            entered.set()
            release.wait(timeout=30)
        start_response("200 OK", [("Content-Length", "0")])
        return []

    pool = asgi.Threads(app, 1)

    async def cancelled_while_waiting(scope, receive, send):
        held = asyncio.ensure_future(pool({**scope, "path": "/held"}, asgi.io.BytesIO(), send))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
        waiting = asyncio.ensure_future(pool({**scope, "path": "/waiting"}, asgi.io.BytesIO(), send))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        held.cancel()
        release.set()  # the thread is free before the queue would have been looked at again
        with pytest.raises(asyncio.CancelledError):
            await held
        pool.executor.shutdown(wait=True)

    assert call(cancelled_while_waiting) == []
    assert ran == ["/held"]
    assert pool.admitted == 0


class Writes:
    """What the event loop writes to each HTTP connection's transport, by transport, a list a call:
    the real asyncio transport's write, counted."""

    def __init__(self, monkeypatch):
        from asyncio import selector_events

        self.calls = {}
        write = selector_events._SelectorSocketTransport.write

        def counted(transport, data):
            self.calls.setdefault(id(transport), []).append(bytes(data))
            return write(transport, data)

        monkeypatch.setattr(selector_events._SelectorSocketTransport, "write", counted)


def ask(port, request):
    """`request` (bytes) on a new connection to the server; every byte it answers until it closes."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_short_answer_goes_out_in_one_write_headers_and_body(app, service_key, monkeypatch, method):
    """Served by uvicorn, a JSON answer (and a HEAD's headers) is written to the socket in one write,
    not its headers and then its body: one segment, and the connection closed after it when the
    client asked for that."""
    writes = Writes(monkeypatch)
    port, stop = serve_with_realtime(app)
    try:
        request = (f"{method} /rest/v1/ HTTP/1.1\r\nHost: 127.0.0.1\r\napikey: {service_key}\r\n"
                   "Connection: close\r\n\r\n").encode()  # fmt: skip
        received = ask(port, request)
    finally:
        stop()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    headers = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])
    length = int(headers[b"content-length"])
    assert headers[b"connection"] == b"close" and length > 0
    assert len(body) == (0 if method == "HEAD" else length)
    assert list(writes.calls.values()) == [[received]]
