"""What reaches the server as raw bytes, on a real socket, served as `python wsgi.py` serves it:
with waitress (runtime.server, REALTIME=off) and with uvicorn (runtime.asgi, Realtime on). Requests
the HTTP server refuses before the app sees them are answered in the API's JSON error body, and
`Expect: 100-continue` on a request without a body is answered at once."""

import json
import socket
import time

import pytest

from support import serve_as_wsgi_py, serve_with_realtime

# The server is what is under test, not the database: SQLite only.
pytestmark = pytest.mark.parametrize("backend", ["sqlite"])

LIMIT = 5  # seconds a test waits for an answer that should come at once


class Wire:
    """Raw bytes to a server on `port`."""

    def __init__(self, port):
        self.port = port

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=LIMIT)

    def send(self, data, until_closed=True):
        """(seconds to the end of the answer, the answer's bytes)."""
        with self.connect() as sock:
            started = time.monotonic()
            sock.sendall(data)
            answer = read_answer(sock, until_closed)
            return time.monotonic() - started, answer


@pytest.fixture(params=["waitress", "uvicorn"])
def wire(app, request):
    """The app behind either server `python wsgi.py` runs, on a free port."""
    serve = serve_as_wsgi_py if request.param == "waitress" else serve_with_realtime
    port, stop = serve(app, threads=4)
    wire = Wire(port)
    wire.server = request.param
    yield wire
    stop()


def read_answer(sock, until_closed=True):
    """Bytes until the server closes, or (`until_closed` false) until one whole answer with a
    Content-Length is in; what came so far when LIMIT passes first."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return received
        if not chunk:
            return received
        received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        if not until_closed and b"content-length: " in head.lower():
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return received


def parse(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"GET /health HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", 200),
        (
            b"POST /auth/v1/logout HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
            401,
        ),
        (b"DELETE /rest/v1/items HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n\r\n", 401),
    ],
)
def test_expect_100_continue_without_a_body_is_answered_at_once(wire, request_bytes, status):
    """waitress sent `100 Continue` and then waited (until its channel timeout, 20 s) for a body
    the request never announced."""
    took, answer = wire.send(request_bytes, until_closed=False)
    assert answer, "no answer"
    assert not answer.startswith(b"HTTP/1.1 100"), answer[:200]
    assert parse(answer)[0] == status, answer[:300]
    assert took < 2


def test_expect_100_continue_with_a_body_still_gets_100_first(wire, anon_key):
    body = json.dumps({"email": "ann@example.com", "password": "secret-pw"}).encode()
    head = (
        b"POST /auth/v1/signup HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\napikey: %s\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (anon_key.encode(), len(body))
    )
    with wire.connect() as sock:
        sock.sendall(head)
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        status, _, answer = parse(read_answer(sock, until_closed=False))
    assert status == 200 and json.loads(answer)["user"]["email"] == "ann@example.com"


REST_KEYS = {"message", "code", "hint", "details"}
AUTH_KEYS = {"code", "error_code", "msg", "message"}
STORAGE_KEYS = {"statusCode", "code", "error", "message"}
BIG = b"a" * 300_000  # over waitress's 256 KiB of headers
HUGE = b"Content-Length: 99999999999\r\n"
TOO_LARGE = "The object exceeded the maximum allowed size"  # Supabase Storage's words


@pytest.mark.parametrize(
    "request_bytes, status, keys, says",
    [
        # a bad byte in the request target: a space, then a bare CR
        (b"GET /rest/v1/items?select=a b HTTP/1.1\r\n\r\n", 400, REST_KEYS, "Start line is invalid"),
        (b"GET /auth/v1/user\rx HTTP/1.1\r\nHost: x\r\n\r\n", 400, AUTH_KEYS, "Bare CR or LF"),
        (b"get /auth/v1/user HTTP/1.1\r\nHost: x\r\n\r\n", 400, AUTH_KEYS, 'method "get"'),
        (b"GET /storage/v1/bucket HTTP/1.1\r\nno colon here\r\n\r\n", 400, STORAGE_KEYS, "Invalid header"),
        (b"GET /elsewhere HTTP/1.1\r\nno colon here\r\n\r\n", 400, REST_KEYS, "Invalid header"),
        (b"POST /rest/v1/items HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400, REST_KEYS, "Content-Length"),
        (b"POST /rest/v1/items HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, REST_KEYS, "Transfer"),
        (b"GET /rest/v1/items HTTP/1.1\r\nX-Big: " + BIG + b"\r\n\r\n", 431, REST_KEYS, "262144 bytes"),
        (b"GET /auth/v1/user HTTP/1.1\r\nX-Big: " + BIG + b"\r\n\r\n", 431, AUTH_KEYS, "262144 bytes"),
        (b"POST /rest/v1/items HTTP/1.1\r\n" + HUGE + b"\r\n", 413, REST_KEYS, "1048576 bytes"),
        (b"POST /auth/v1/signup HTTP/1.1\r\n" + HUGE + b"\r\n", 413, AUTH_KEYS, "1048576 bytes"),
        (b"POST /storage/v1/object/b/f HTTP/1.1\r\n" + HUGE + b"\r\n", 413, STORAGE_KEYS, TOO_LARGE),
        (b"POST http://x/storage/v1/object/f HTTP/1.1\r\n" + HUGE + b"\r\n", 413, STORAGE_KEYS, TOO_LARGE),
    ],
)  # fmt: skip
def test_requests_waitress_refuses_get_the_apis_json_error(wire, request_bytes, status, keys, says):
    """waitress and uvicorn answered these themselves, in text/plain, before the app saw them (uvicorn
    had no body limit: the app read the body on a thread, however long)."""
    took, answer = wire.send(request_bytes)
    got, headers, body = parse(answer)
    assert got == status, answer[:300]
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff" and headers["connection"] == "close"
    error = json.loads(body)
    assert set(error) == keys, error
    assert says in error["message"] or (wire.server == "uvicorn" and status == 400), error
    assert (error["statusCode"] if keys is STORAGE_KEYS else error["code"]) in (status, str(status))
    assert took < LIMIT


def test_a_refused_request_from_an_sdk_gets_the_sdks_shape_and_cors(wire):
    took, answer = wire.send(
        b"GET /auth/v1/user HTTP/1.1\r\nHost: x\r\nX-Supabase-Api-Version: 2024-01-01\r\n"
        b"Origin: https://app.example.com\r\nX-Padding: 1\r\nbroken\r\n\r\n"
    )
    status, headers, body = parse(answer)
    assert status == 400 and headers["access-control-allow-origin"] == "*"
    assert json.loads(body)["code"] == "bad_request"
    took, answer = wire.send(
        b"GET /rest/v1/items HTTP/1.1\r\nX-Client-Info: supabase-js/2.0\r\nX-Padding: 1\r\nbroken\r\n\r\n"
    )
    assert json.loads(parse(answer)[2])["code"] == "PGRST100"


def test_a_chunked_body_over_the_limit_gets_the_apis_413(wire, anon_key):
    """No Content-Length to refuse it by: it is counted as it comes (waitress: by the app as it reads
    it), and answered past the limit, in the API's JSON."""
    chunk = b"a" * 65536
    with wire.connect() as sock:
        sock.sendall(
            b"POST /auth/v1/signup HTTP/1.1\r\nHost: x\r\napikey: %s\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % anon_key.encode()
        )
        try:
            for _ in range(17):  # 1.0625 MiB, over MAX_CONTENT_LENGTH
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the end: read what it said
        status, headers, body = parse(read_answer(sock))
    assert status == 413 and headers["content-type"] == "application/json"
    error = json.loads(body)
    assert set(error) == AUTH_KEYS and error["code"] == 413, error


def test_expect_100_continue_over_the_limit_is_refused_without_asking_for_the_body(wire):
    took, answer = wire.send(
        b"POST /storage/v1/object/b/f HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n" + HUGE + b"\r\n"
    )
    assert not answer.startswith(b"HTTP/1.1 100"), answer[:200]
    status, headers, body = parse(answer)
    assert status == 413 and set(json.loads(body)) == STORAGE_KEYS and took < LIMIT
