"""Uploads on a real socket, as `python wsgi.py` serves them: under uvicorn (Realtime on), whose
event loop receives a body sent to /storage/ into a files.Spool in STORAGE_ROOT/.tmp with its md5
as it arrives (the upload takes that file, uncopied), and under waitress, whose buffer the upload
copies. Every byte and its md5, raw, chunked or in a form; and a body refused, too large or cut
off leaves no file in .tmp, no object and no row."""

import hashlib
import http.client
import io
import socket
import time

import pytest

from errors import APIError
from storage import files
from support import eventually, serve_as_wsgi_py, serve_with_realtime

SQLITE = pytest.mark.parametrize("backend", ["sqlite"])  # the servers are under test, not the database
OBJECTS = "/storage/v1/object"
MEMORY = files.SPOOL_MEMORY


@pytest.fixture(params=["uvicorn", "waitress"])
def served(app, request):
    serve = serve_with_realtime if request.param == "uvicorn" else serve_as_wsgi_py
    port, stop = serve(app, threads=2)
    yield port
    stop()


def payload(size):
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def send(port, method, path, headers, body=b"", chunks=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if chunks is None:
            connection.request(method, path, body=body, headers=headers)
        else:
            connection.request(method, path, body=iter(chunks), headers=headers, encode_chunked=True)
        answer = connection.getresponse()
        return answer, answer.read()
    finally:
        connection.close()


def tmp_files(root):
    return sorted((root / ".tmp").glob("*")) if (root / ".tmp").exists() else []


def object_files(root):
    return sorted(path for path in (root / "objects").rglob("*") if path.is_file())


@SQLITE
@pytest.mark.parametrize("size", [1, MEMORY, MEMORY + 1, 2 * MEMORY, 3 * MEMORY, 6 * 1024 * 1024 + 7])
def test_an_upload_is_every_byte_with_its_md5_raw_or_chunked(
    served, service, storage_root, size, request, monkeypatch
):
    taken, take = [], files.Spool.take
    monkeypatch.setattr(files.Spool, "take", lambda spool, *args: taken.append(spool) or take(spool, *args))
    data = payload(size)
    headers = {"apikey": service.key, "Content-Type": "application/octet-stream"}
    answer, _ = send(served, "POST", f"{OBJECTS}/locked/raw.bin", headers, body=data)
    assert answer.status == 200
    cut = [data[i : i + 100_000] for i in range(0, size, 100_000)]
    answer, _ = send(served, "POST", f"{OBJECTS}/locked/chunked.bin", headers, chunks=cut)
    assert answer.status == 200
    for name in ("raw.bin", "chunked.bin"):
        got, body = send(served, "GET", f"{OBJECTS}/locked/{name}", {"apikey": service.key})
        assert body == data and got.getheader("ETag") == f'"{hashlib.md5(data).hexdigest()}"'
    eventually(lambda: tmp_files(storage_root) == [], 5)
    assert len(object_files(storage_root)) == 2
    assert len(taken) == (2 if request.node.callspec.params["served"] == "uvicorn" else 0)  # uncopied


def form(boundary, *files):
    """A multipart form as supabase-js sends one: cacheControl, then the files (name, bytes)."""
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="cacheControl"\r\n\r\n60\r\n'.encode()]
    for name, data in files:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="f.bin"\r\n'
                     f"Content-Type: image/png\r\n\r\n".encode() + data + b"\r\n")  # fmt: skip
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


@SQLITE
def test_a_form_is_parsed_into_the_file_the_upload_takes(served, service, storage_root, monkeypatch):
    taken, take = [], files.Spool.take
    monkeypatch.setattr(files.Spool, "take", lambda spool, *args: taken.append(spool) or take(spool, *args))
    data, other = payload(MEMORY + 5), payload(MEMORY * 2)
    headers = {"apikey": service.key, "Content-Type": "multipart/form-data; boundary=minibase-boundary"}
    body = form("minibase-boundary", ("", data), ("second", other))
    answer, _ = send(served, "POST", f"{OBJECTS}/locked/form.bin", headers, body=body)
    assert answer.status == 200 and len(taken) == 1  # the form's first file, uncopied
    got, body = send(served, "GET", f"{OBJECTS}/locked/form.bin", {"apikey": service.key})
    assert body == data and got.getheader("Cache-Control") == "max-age=60"
    assert got.getheader("ETag") == f'"{hashlib.md5(data).hexdigest()}"'
    json_headers = {"apikey": service.key, "Content-Type": "application/json"}
    listed, body = send(served, "POST", f"{OBJECTS}/list/locked", json_headers, body=b'{"prefix": ""}')
    assert listed.status == 200 and b"form.bin" in body
    eventually(lambda: tmp_files(storage_root) == [], 5)  # the second file's Spool too
    assert len(object_files(storage_root)) == 1


@SQLITE
def test_a_refused_or_too_large_upload_leaves_no_file(served, service, anon_key, storage_root):
    data = payload(MEMORY * 3)
    refused, _ = send(served, "POST", f"{OBJECTS}/locked/no.bin",
                      {"apikey": anon_key, "Content-Type": "text/plain"}, body=data)  # fmt: skip
    assert refused.status in (401, 403)
    too_large, _ = send(served, "POST", f"{OBJECTS}/avatars/big.txt",  # the bucket's limit: 1 KB
                        {"apikey": service.key, "Content-Type": "text/plain"}, body=data)  # fmt: skip
    assert too_large.status == 413
    in_form = {"Content-Type": "multipart/form-data; boundary=b"}
    refused, _ = send(served, "POST", f"{OBJECTS}/locked/no.bin", {"apikey": anon_key, **in_form},
                      body=form("b", ("", data)))  # fmt: skip
    assert refused.status in (401, 403)
    too_large, _ = send(served, "POST", f"{OBJECTS}/avatars/big.txt", {"apikey": service.key, **in_form},
                        body=form("b", ("", data)))  # fmt: skip
    assert too_large.status == 413
    eventually(lambda: tmp_files(storage_root) == [], 5)
    assert object_files(storage_root) == []
    listed = service.post(f"{OBJECTS}/list/avatars", json={"prefix": ""}).json
    assert listed == [] and service.post(f"{OBJECTS}/list/locked", json={"prefix": ""}).json == []


@SQLITE
def test_a_form_cut_off_mid_file_leaves_no_file(served, service, anon_key, storage_root):
    """A form whose file part never ends (no closing boundary) is parsed as an empty form: the
    Spool its file was being written into is removed all the same, whoever sent it, to any bucket."""
    part = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="f.bin"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n" + payload(4 * MEMORY))  # fmt: skip
    for key, bucket in ((anon_key, "locked"), (anon_key, "nosuch"), (service.key, "locked")):
        headers = {"apikey": key, "Content-Type": "multipart/form-data; boundary=b"}
        answer, _ = send(served, "POST", f"{OBJECTS}/{bucket}/cut.bin", headers, body=part)
        assert answer.status == 400, (key, bucket)
    eventually(lambda: tmp_files(storage_root) == [], 5)
    assert object_files(storage_root) == []


@SQLITE
# waitress leaves the buffer of a request cut off to the garbage collector (an unnamed temporary
# file, HTTPChannel.handle_close); a Spool left open would still be named in .tmp.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <_io.FileIO:pytest.PytestUnraisableExceptionWarning"
)
def test_a_body_cut_off_halfway_leaves_no_file_and_no_row(served, service, storage_root, request):
    head = (f"POST {OBJECTS}/locked/cut.bin HTTP/1.1\r\nHost: x\r\napikey: {service.key}\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {16 * MEMORY}\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", served), timeout=10) as sock:
        sock.sendall(head + payload(8 * MEMORY))  # under uvicorn, batches written on the spooling thread
        if request.node.callspec.params["served"] == "uvicorn":  # into its Spool's file, in .tmp
            eventually(lambda: len(tmp_files(storage_root)) == 1, 5)
        else:
            time.sleep(0.3)  # into waitress's buffer
    eventually(lambda: tmp_files(storage_root) == [], 5)
    assert object_files(storage_root) == []
    assert service.post(f"{OBJECTS}/list/locked", json={"prefix": ""}).json == []


@pytest.mark.parametrize("size", [0, 1, MEMORY, MEMORY + 1, 5 * MEMORY + 3])
def test_a_spool_is_taken_as_its_file_with_its_md5(tmp_path, size):
    data = payload(size)
    spool = files.Spool(tmp_path / ".tmp")
    for start in range(0, size, 65536):
        spool.write(data[start : start + 65536])
    spool.seek(0)
    received = spool.take(size, tmp_path / ".tmp")
    spool.close()  # the server's end of the request: the file is the upload's now
    assert received.size == size and received.md5 == hashlib.md5(data).hexdigest()
    with open(received.path, "rb") as stored:
        assert stored.read() == data
    received.discard()
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_a_spool_read_as_a_file_is_removed_when_closed(tmp_path):
    data = payload(2 * MEMORY)
    spool = files.Spool(tmp_path)
    spool.write(data[:MEMORY])
    spool.write(data[MEMORY:])
    assert len(list(tmp_path.iterdir())) == 1  # past the memory it keeps: in its file
    spool.seek(0)
    assert spool.read(10) + spool.read() == data
    with pytest.raises(APIError) as too_large:
        spool.take(len(data) - 1, tmp_path)
    assert too_large.value.status == 413
    spool.close()
    assert list(tmp_path.iterdir()) == []


def test_a_spool_closed_while_a_write_is_queued_stays_removed(tmp_path):
    spool = files.Spool(tmp_path)
    spool.write(payload(MEMORY + 1))
    spool.close()  # the loop's, on a hang-up, while the spooling thread still has batches to write
    spool.write(payload(MEMORY))
    assert list(tmp_path.iterdir()) == []


def test_a_disk_that_fails_while_the_body_arrives_is_a_503_and_leaves_no_file(tmp_path):
    class Full(io.BytesIO):
        def write(self, chunk):
            raise OSError(28, "No space left on device")

    spool = files.Spool(tmp_path)
    spool.write(payload(MEMORY + 1))  # into its file
    spool.file.close()
    spool.file = Full()  # the disk fills up
    spool.write(b"more")
    assert list(tmp_path.iterdir()) == []
    for use in (lambda: spool.take(10**9, tmp_path), spool.read):
        with pytest.raises(APIError) as unavailable:
            use()
        assert unavailable.value.status == 503
    spool.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def test_an_upload_is_held_to_its_buckets_row_as_it_is_now(service, anon_key, app):
    buckets = "/storage/v1/bucket"
    made = service.post(
        buckets, json={"id": "docs", "file_size_limit": 100, "allowed_mime_types": ["image/*"]}
    )
    assert made.status_code == 200
    text = {"Content-Type": "text/plain"}
    assert service.post(f"{OBJECTS}/docs/a.txt", data=b"x" * 10, headers=text).status_code == 415
    changed = {"file_size_limit": 5, "allowed_mime_types": ["text/plain"]}
    assert service.put(f"{buckets}/docs", json=changed).status_code == 200
    assert service.post(f"{OBJECTS}/docs/a.txt", data=b"x" * 10, headers=text).status_code == 413
    assert service.put(f"{buckets}/docs", json={"file_size_limit": 100}).status_code == 200
    assert service.post(f"{OBJECTS}/docs/a.txt", data=b"x" * 10, headers=text).status_code == 200
    anon = app.test_client().post(f"{OBJECTS}/docs/b.txt", data=b"x", headers={"apikey": anon_key, **text})
    assert anon.status_code in (401, 403)  # a bucket the API made is the service_role's alone
    assert (
        service.post(f"{OBJECTS}/docs/a.txt", data=b"y", headers={**text, "x-upsert": "true"}).status_code
        == 200
    )
    removed = service.delete(f"{OBJECTS}/docs", json={"prefixes": ["a.txt"]})
    assert removed.status_code == 200
    assert service.delete(f"{buckets}/docs").status_code == 200
    gone = service.post(f"{OBJECTS}/docs/a.txt", data=b"x", headers=text)
    assert gone.status_code == 404 and gone.json["error"] == "Bucket not found"
    for hostile in ("..", "a/../b", "x" * 64, "a%00"):
        assert service.post(f"{OBJECTS}/{hostile}/a.txt", data=b"x", headers=text).status_code in (400, 404)


def test_placing_a_file_again_does_nothing_more(tmp_path):
    disk = files.Disk(tmp_path)
    received = files.receive(io.BytesIO(b"bytes"), 10, tmp_path / ".tmp")
    key = files.new_key()
    disk.place(received, key)
    disk.place(received, key)  # a transaction tried again
    assert disk.path(key).read_bytes() == b"bytes" and list((tmp_path / ".tmp").iterdir()) == []
    received.discard()
    with pytest.raises(APIError) as lost:
        disk.place(received, files.new_key())  # its file gone, and never placed: not a silent success
    assert lost.value.status == 503
