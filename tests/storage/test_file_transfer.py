"""Downloads on a real socket, as `python wsgi.py` serves them: under uvicorn (Realtime on), where
the loop sends a whole file with sendfile(2) (runtime.uvicorn_seam.Cycle), and under waitress. Every byte,
the headers, ranges and 304s, connections kept alive across downloads, and clients that hang up
halfway through one. And an upload's bytes and md5, hashed on a thread beside the copy."""

import hashlib
import http.client
import io
import socket
import threading

import pytest
from werkzeug.exceptions import ClientDisconnected

from errors import APIError
from runtime import asgi
from storage import files
from support import asgi_get, serve_as_wsgi_py, serve_with_realtime

SQLITE = pytest.mark.parametrize("backend", ["sqlite"])  # the server is under test, not the database

OBJECTS = "/storage/v1/object"
PAYLOAD = bytes(range(256)) * 4096 + b"end"  # 1 MB and 3 bytes: no block boundary at its end


@pytest.fixture(params=["uvicorn", "waitress"])
def served(app, service, request):
    """(the port of `app` served as `python wsgi.py` serves it, the service key's headers), with
    PAYLOAD uploaded as private/big.bin."""
    done = service.post(f"{OBJECTS}/private/big.bin", data=PAYLOAD, headers={"Content-Type": "image/png"})
    assert done.status_code == 200
    serve = serve_with_realtime if request.param == "uvicorn" else serve_as_wsgi_py
    port, stop = serve(app, threads=2)
    yield port, {"apikey": service.key}
    stop()


def get(connection, headers, method="GET", path=f"{OBJECTS}/private/big.bin"):
    connection.request(method, path, headers=headers)
    answer = connection.getresponse()
    return answer, answer.read()


@SQLITE
def test_a_download_is_every_byte_with_its_headers_on_a_kept_alive_connection(served):
    port, key = served
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(3):  # the connection serves the next request once the file is sent
        answer, body = get(connection, key)
        assert answer.status == 200 and body == PAYLOAD
        assert answer.headers["Content-Length"] == str(len(PAYLOAD))
        assert answer.headers["Content-Type"] == "image/png" and answer.headers["Accept-Ranges"] == "bytes"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert (
            answer.headers["ETag"] == f'"{hashlib.md5(PAYLOAD).hexdigest()}"'
            and answer.headers["Last-Modified"]
        )
    part, body = get(connection, {**key, "Range": "bytes=1048570-"})
    assert part.status == 206 and body == PAYLOAD[1048570:]
    assert part.headers["Content-Range"] == f"bytes 1048570-{len(PAYLOAD) - 1}/{len(PAYLOAD)}"
    same, body = get(connection, {**key, "If-None-Match": answer.headers["ETag"]})
    assert same.status == 304 and body == b""
    head, body = get(connection, key, method="HEAD")
    assert head.status == 200 and body == b"" and head.headers["Content-Length"] == str(len(PAYLOAD))
    answer, body = get(connection, key)
    assert answer.status == 200 and body == PAYLOAD
    connection.close()


@SQLITE
def test_clients_that_hang_up_halfway_leave_the_server_serving(served, caplog):
    """More clients than threads each read the start of the file and hang up (some with a reset):
    no thread is left waiting on them, nothing is logged as an error, and the next download is
    whole."""
    port, key = served
    request = f"GET {OBJECTS}/private/big.bin HTTP/1.1\r\nHost: x\r\napikey: {key['apikey']}\r\n\r\n"
    for n in range(6):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(request.encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            if n % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    answer, body = get(connection, key)
    assert answer.status == 200 and body == PAYLOAD
    connection.close()
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []


@SQLITE
def test_a_whole_file_goes_to_the_loop_in_one_message_where_the_server_sends_files(app, service):
    """Under uvicorn the thread hands the open file over once (ASGI's zero-copy send), with where
    to start and how much to send; a response that is not a file on disk goes in blocks."""
    assert service.post(f"{OBJECTS}/private/big.bin", data=PAYLOAD).status_code == 200

    def read(message):  # the file as it is handed over, before the server closes it
        if message["type"] == asgi.ZERO_COPY:
            message["file"].seek(message["offset"])
            message = {**message, "read": message["file"].read(message["count"])}
        return message

    sent = asgi_get(app, f"{OBJECTS}/private/big.bin", [(b"apikey", service.key.encode())],
                    extensions={asgi.ZERO_COPY: {}}, keep=read)  # fmt: skip
    start, whole = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert whole["type"] == asgi.ZERO_COPY and whole["offset"] == 0 and whole["count"] == len(PAYLOAD)
    assert whole["read"] == PAYLOAD and whole["more_body"] is False and whole["file"].closed
    stream = asgi.SentFile(io.BytesIO(PAYLOAD))  # an S3 object's body: no file descriptor
    scope = {"asgi.scope": {"extensions": {asgi.ZERO_COPY: {}}}}
    assert asgi._zero_copy(scope, stream, [("Content-Length", str(len(PAYLOAD)))]) is None


INLINE = files.INLINE * files.CHUNK


@pytest.mark.parametrize(
    "size", [0, 1, files.CHUNK, files.CHUNK + 1, INLINE, INLINE + 1, 9 * files.CHUNK + 5]
)
def test_a_body_is_received_whole_with_its_md5(tmp_path, size):
    """Around the chunks' edges: the first INLINE chunks are hashed in place, the rest on the md5
    thread, in order."""
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    received = files.receive(io.BytesIO(data), len(data), tmp_path)
    assert received.size == size and received.md5 == hashlib.md5(data).hexdigest()
    with open(received.path, "rb") as stored:
        assert stored.read() == data


def test_a_body_cut_off_or_too_large_leaves_no_file_and_no_md5_thread(tmp_path):
    class Cut(io.RawIOBase):
        sent = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.sent > 3 * files.CHUNK:
                raise ClientDisconnected()
            self.sent += len(buffer)
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    before = threading.active_count()
    with pytest.raises(ClientDisconnected):
        files.receive(io.BufferedReader(Cut()), 10 * files.CHUNK, tmp_path)
    with pytest.raises(APIError) as large:
        files.receive(io.BytesIO(b"x" * (5 * files.CHUNK)), 4 * files.CHUNK, tmp_path)
    assert large.value.status == 413
    assert list(tmp_path.iterdir()) == [] and threading.active_count() == before
