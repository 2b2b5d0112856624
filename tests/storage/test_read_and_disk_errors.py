"""An upload that fails says whose side failed: a client that breaks off halfway is a 400 (it is the
client's body that could not be read), a disk that is full or read-only a 503. The client is a real
socket that resets its connection mid-body or sends malformed chunks, under a server that hands the
app the body as it comes (werkzeug's, as `flask run` serves), and a socket's stream handed to
files.receive as it is; the disk a real tmpfs, small or mounted read-only."""

import socket
import struct
import subprocess
import threading

import pytest
from werkzeug.serving import make_server

from errors import APIError
from storage import files
from support import Api, assert_storage_error, eventually

OBJECTS = "/storage/v1/object"


def leftovers(root):
    staging = root / ".tmp"
    return sorted(staging.iterdir()) if staging.exists() else []


@pytest.fixture
def streaming(app):
    """`app` under werkzeug's threaded server, which reads the body as the app does: (its port, the
    statuses it answered)."""
    statuses, inner = [], app.wsgi_app

    def recording(environ, start_response):
        def start(status, headers, exc_info=None):
            statuses.append(int(status.split()[0]))
            return start_response(status, headers, exc_info)

        return inner(environ, start)

    app.wsgi_app = recording
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port, statuses
    server.shutdown()
    thread.join(10)


def chunked(port, path, headers, body):
    """A socket that has sent a chunked POST's headers and `body`, as it is (chunks, or not)."""
    client = socket.create_connection(("127.0.0.1", port))
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return client


def chunk(data):
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def reset(client):
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a RST: the server's next read fails with ECONNRESET


def test_a_client_that_breaks_off_halfway_is_a_400_not_a_disk_failure(
    streaming, service, service_key, storage_root, caplog
):
    """A chunked body is read from the socket as it comes (a Content-Length one through werkzeug's
    LimitedStream, which already says the client disconnected)."""
    port, statuses = streaming
    headers = {"apikey": service_key, "Content-Type": "text/plain"}
    client = chunked(port, f"{OBJECTS}/locked/cut.txt", headers, chunk(b"x" * 300_000) * 2)
    eventually(lambda: any(path.stat().st_size > 0 for path in leftovers(storage_root)))  # it is reading
    reset(client)
    eventually(lambda: statuses)
    assert statuses == [400]
    assert leftovers(storage_root) == []
    assert service.post(f"{OBJECTS}/list/locked", json={}).json == []
    assert not [record for record in caplog.records if "disk" in record.getMessage().lower()]


def test_a_body_whose_chunks_are_malformed_is_a_400(streaming, service, service_key, storage_root):
    port, statuses = streaming
    headers = {"apikey": service_key, "Content-Type": "text/plain", "Connection": "close"}
    client = chunked(port, f"{OBJECTS}/locked/bad.txt", headers, chunk(b"abc") + b"zz\r\nnot a chunk\r\n")
    with client, client.makefile("rb") as answer:
        assert answer.readline().split()[1] == b"400"
    assert statuses == [400]
    assert leftovers(storage_root) == []
    assert service.post(f"{OBJECTS}/list/locked", json={}).json == []


def test_receive_tells_a_reset_connection_from_a_broken_disk(tmp_path):
    """files.receive on a socket's own stream, as a server that does not wrap wsgi.input in
    werkzeug's LimitedStream hands it over: a reset is the client's side, a 400."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    client.sendall(b"x" * 1000)
    reset(client)
    with server, server.makefile("rb") as stream, pytest.raises(APIError) as refused:
        files.receive(stream, 10**6, tmp_path)
    assert refused.value.status == 400
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KB tmpfs of its own: (where, remount(options))."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")

    def remount(options):
        subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True)

    yield where, remount
    subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_full_disk_is_a_503_and_keeps_nothing(make_app, tables_config, service_key, small_disk):
    root, _ = small_disk
    client = Api(make_app(TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(root)), service_key)
    text = {"Content-Type": "text/plain"}
    assert client.post(f"{OBJECTS}/locked/small.txt", data=b"fits", headers=text).status_code == 200
    big = client.post(f"{OBJECTS}/locked/big.txt", data=b"x" * 1_000_000, headers=text)
    body = assert_storage_error(big, 503)
    assert "disk" in body["message"]
    assert leftovers(root) == []
    assert [entry["name"] for entry in client.post(f"{OBJECTS}/list/locked", json={}).json] == ["small.txt"]


def test_a_read_only_disk_is_a_503(make_app, tables_config, service_key, small_disk):
    root, remount = small_disk
    client = Api(make_app(TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(root)), service_key)
    text = {"Content-Type": "text/plain"}
    assert client.post(f"{OBJECTS}/locked/before.txt", data=b"one", headers=text).status_code == 200
    remount("ro")
    assert_storage_error(client.post(f"{OBJECTS}/locked/after.txt", data=b"two", headers=text), 503)
    assert client.get(f"{OBJECTS}/locked/before.txt", buffered=True).data == b"one"  # reads go on
    remount("rw")
    assert client.post(f"{OBJECTS}/locked/after.txt", data=b"two", headers=text).status_code == 200
