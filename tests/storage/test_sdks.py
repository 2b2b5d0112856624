"""The official SDKs' storage clients against minibase over a real waitress server, on both
databases: supabase-py (storage3) in-process, supabase-js under node (skipped without node)."""

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from support import serve_app, supabase_clients

supabase = pytest.importorskip("supabase")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # about the SDK's own internals
from storage3.exceptions import StorageApiError  # noqa: E402

JS = Path(__file__).resolve().parent.parent / "js"


@pytest.fixture
def server(app):
    base, stop = serve_app(app)
    yield base
    stop()


@pytest.fixture
def connect(server):
    with supabase_clients(server) as make:
        yield make


def test_supabase_py_storage(connect, anon_key, service_key, server):
    admin = connect(service_key).storage
    assert {bucket.id for bucket in admin.list_buckets()} == {"avatars", "private", "locked"}
    admin.create_bucket("docs", options={"public": False, "file_size_limit": 1024 * 1024})
    assert admin.get_bucket("docs").file_size_limit == 1024 * 1024
    admin.update_bucket("docs", options={"public": True})
    assert admin.get_bucket("docs").public is True

    client = connect(anon_key)
    client.auth.sign_up({"email": "py@example.com", "password": "secret-pw"})
    avatars = client.storage.from_("avatars")
    done = avatars.upload("py/hello.txt", b"hello from py", {"content-type": "text/plain"})
    assert done.path == "py/hello.txt" and done.full_path == "avatars/py/hello.txt"
    assert avatars.download("py/hello.txt") == b"hello from py"
    avatars.update("py/hello.txt", b"updated", {"content-type": "text/plain"})
    assert avatars.download("py/hello.txt") == b"updated"
    assert [entry["name"] for entry in avatars.list("py")] == ["hello.txt"]
    assert avatars.info("py/hello.txt")["size"] == 7
    assert avatars.exists("py/hello.txt") and not avatars.exists("py/none.txt")
    public = avatars.get_public_url("py/hello.txt")
    assert httpx.get(public).content == b"updated"  # no API key: a link in a page
    signed = avatars.create_signed_url("py/hello.txt", 60)["signedURL"]
    assert httpx.get(signed).content == b"updated"
    many = avatars.create_signed_urls(["py/hello.txt", "py/none.txt"], 60)
    assert httpx.get(many[0]["signedURL"]).content == b"updated" and many[1]["signedURL"] is None
    upload_url = avatars.create_signed_upload_url("py/signed.txt")
    avatars.upload_to_signed_url(
        "py/signed.txt", upload_url["token"], b"via token", {"content-type": "text/plain"}
    )
    assert avatars.download("py/signed.txt") == b"via token"
    avatars.move("py/signed.txt", "py/moved.txt")
    avatars.copy("py/moved.txt", "py/copied.txt")
    assert avatars.download("py/copied.txt") == b"via token"
    removed = avatars.remove(["py/hello.txt", "py/moved.txt", "py/copied.txt"])
    assert len(removed) == 3 and avatars.list("py") == []
    with pytest.raises(StorageApiError) as missing:
        avatars.download("py/hello.txt")
    assert str(missing.value.status) == "404"
    with pytest.raises(StorageApiError) as refused:
        client.storage.from_("locked").upload("x.txt", b"x")
    assert str(refused.value.status) == "403"
    admin.empty_bucket("docs")
    admin.delete_bucket("docs")


def test_supabase_js_storage(node_modules, server, anon_key, service_key):
    env = {**os.environ, "MINIBASE_URL": server, "ANON_KEY": anon_key, "SERVICE_KEY": service_key}
    done = subprocess.run(
        ["node", "storage.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["buckets"] == ["avatars", "locked", "private"] and out["created"] == "docs"
    assert out["uploaded"] == "avatars/js/hello.txt" and out["downloaded"] == "hello from js"
    assert out["listV2"] == [[True, ["js/blob.txt"], 0], [False, ["js/hello.txt"], 0]]
    assert out["tooLarge"] == ["413", "The object exceeded the maximum allowed size"]
    assert out["transformations"] == "height:2,width:2,resizing_type:fill,quality:60"
    assert out["listed"] == ["hello.txt"] and out["info"] == 13 and out["exists"] and not out["missing"]
    assert out["public"] == "hello from js" and out["signed"] == "hello from js" and out["batch"] == 2
    assert out["viaToken"] == "via token" and out["moved"] == "via token" and out["removed"] == 3
    assert (
        out["updateMissing"] == "404"
        and out["refused"] == "403"
        and out["notFound"] == 404
        and out["deleted"] == "Successfully deleted"
    )
