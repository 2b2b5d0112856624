"""Resumable uploads with the clients apps use, against a real waitress server: tus-js-client under
node (tests/js/resumable.mjs), as Supabase's docs write it (6 MB chunks, data with the creation) and
resuming after the connection is cut mid-upload; Uppy's tus plugin in Debian's Chromium, from a page
of another origin (CORS). SQLite only: the protocol is the clients' concern here, the databases are
test_resumable.py's."""

import functools
import json
import os
import subprocess
import threading
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support import serve_app

JS = Path(__file__).resolve().parents[1] / "js"

FILES = """
[buckets.files]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.images]
allowed_mime_types = ["image/*"]
select = "owner"
insert = "authenticated"
"""


@pytest.fixture
def backend():
    return "sqlite"


@pytest.fixture
def server(make_app, tmp_path):
    config = tmp_path / "tables.toml"
    config.write_text(FILES)
    base, stop = serve_app(make_app(TABLES_CONFIG=str(config), STORAGE_ROOT=str(tmp_path / "storage")))
    yield base
    stop()


def test_tus_js_client_uploads_and_resumes(node_modules, server, anon_key, tmp_path):
    env = {**os.environ, "MINIBASE_URL": server, "ANON_KEY": anon_key}
    done = subprocess.run(
        ["node", "resumable.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    big = out["big"]
    assert big["status"] == 200 and big["same"] and big["cache"] == "max-age=3600"
    assert big["requests"] == ["POST 201", "PATCH 204"], big  # 6 MB with the creation, then the rest
    resumed = out["resumed"]
    assert resumed["cut"] and resumed["same"] and resumed["size"] == 1024 * 1024
    # After the cut the client asked where the upload stood, and went on from there, not from 0.
    assert len(resumed["heads"]) == 1 and 0 < resumed["heads"][0] < 1024 * 1024, resumed
    assert resumed["heads"][0] % (64 * 1024) == 0
    assert resumed["patches"] < 1024 * 1024 // (64 * 1024) + 3
    assert out["takeover"] == 404
    assert [p for p in (tmp_path / "storage" / "uploads").rglob("*") if p.is_file()] == []


@pytest.fixture
def page_server(node_modules, tmp_path):
    """A page of another origin with Uppy and its tus plugin, bundled from node_modules by esbuild."""
    site = tmp_path / "site"
    site.mkdir()
    esbuild = [str(node_modules / ".bin" / "esbuild"), "uppy.mjs", "--bundle", "--format=iife"]
    built = subprocess.run(
        [*esbuild, f"--outfile={site}/uppy.js"], cwd=JS, capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (site / "index.html").write_text('<!doctype html><title>uppy</title><script src="uppy.js"></script>')
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def sign_up(server, anon_key, email):
    request = urllib.request.Request(
        f"{server}/auth/v1/signup",
        data=json.dumps({"email": email, "password": "secret-pw"}).encode(),
        headers={"apikey": anon_key, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        body = json.load(response)
    return body["access_token"], str(body["user"]["id"])


def pattern(size):
    return bytes((i * 31 + 7) % 251 for i in range(size))


def test_uppy_uploads_from_a_browser(server, page_server, anon_key, chromium):
    token, user_id = sign_up(server, anon_key, "uppy@example.com")
    size = 7 * 1024 * 1024
    endpoint = f"{server}/storage/v1/upload/resumable"
    sent = {"endpoint": endpoint, "anon": anon_key, "token": token, "size": size}
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(page_server)
        upload = "args => window.uploadWithUppy(args)"
        done = page.evaluate(
            upload,
            {**sent, "bucketName": "files", "objectName": f"{user_id}/video.bin", "type": "video/mp4"},
        )
        refused = page.evaluate(
            upload,
            {**sent, "bucketName": "images", "objectName": f"{user_id}/a.txt", "type": "text/plain"},
        )
    finally:
        context.close()
    assert done == {"successful": 1, "failed": []}
    request = urllib.request.Request(
        f"{server}/storage/v1/object/files/{user_id}/video.bin",
        headers={"apikey": anon_key, "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.read() == pattern(size)
        assert (
            response.headers["Content-Type"] == "video/mp4"
            and response.headers["Cache-Control"] == "max-age=3600"
        )
    assert refused["successful"] == 0 and len(refused["failed"]) == 1
    assert (
        "response code: 415" in refused["failed"][0] and "text/plain is not supported" in refused["failed"][0]
    )
