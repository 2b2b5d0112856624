"""/storage/v1 objects on both databases, with their bytes in a temporary STORAGE_ROOT: uploads
(raw, multipart, upsert, limits), downloads (headers, 304, 206, attachments), the rule words with
owner as the uploader, listing, move, copy, remove, and names that try to leave STORAGE_ROOT."""

import base64
import io
import json
from urllib.parse import unquote

import pytest
from werkzeug.exceptions import ClientDisconnected
from werkzeug.test import EnvironBuilder, run_wsgi_app

from support import Api, asgi_get, assert_storage_error

OBJECTS = "/storage/v1/object"


def stored_files(root):
    return sorted(path.name for path in (root / "objects").rglob("*") if path.is_file())


def leftovers(root):
    return sorted(path.name for path in (root / ".tmp").glob("*")) if (root / ".tmp").exists() else []


def upload(client, path, data=b"hello", token=None, content_type="text/plain", **headers):
    return client.post(
        f"{OBJECTS}/{path}", data=data, token=token, headers={"Content-Type": content_type, **headers}
    )


def test_an_upload_is_downloaded_with_its_headers(service, api, storage_root):
    done = upload(service, "avatars/a/b.txt", **{"cache-control": "max-age=60"})
    assert done.status_code == 200 and done.json["Key"] == "avatars/a/b.txt" and done.json["Id"]
    got = api.get(f"{OBJECTS}/avatars/a/b.txt")
    assert got.status_code == 200 and got.data == b"hello"
    assert got.headers["ETag"] == '"5d41402abc4b2a76b9719d911017c592"'  # md5 of the bytes
    assert got.headers["Cache-Control"] == "max-age=60" and got.headers["Last-Modified"]
    assert got.headers["X-Content-Type-Options"] == "nosniff" and got.mimetype == "text/plain"
    assert "sandbox" in got.headers["Content-Security-Policy"]
    same = api.get(f"{OBJECTS}/avatars/a/b.txt", headers={"If-None-Match": got.headers["ETag"]})
    assert same.status_code == 304 and same.data == b""
    part = api.get(f"{OBJECTS}/authenticated/avatars/a/b.txt", headers={"Range": "bytes=1-3"})
    assert part.status_code == 206 and part.data == b"ell" and part.headers["Content-Range"] == "bytes 1-3/5"
    assert api.head(f"{OBJECTS}/avatars/a/b.txt").headers["Content-Length"] == "5"
    named = api.get(f"{OBJECTS}/avatars/a/b.txt?download=hi.txt")
    assert named.headers["Content-Disposition"] == "attachment; filename=hi.txt"
    info = api.get(f"{OBJECTS}/info/avatars/a/b.txt").json
    assert info["name"] == "a/b.txt" and info["size"] == 5 and info["content_type"] == "text/plain"
    assert stored_files(storage_root) != [] and "b.txt" not in stored_files(storage_root)
    assert leftovers(storage_root) == []


def test_public_objects_and_signed_urls_need_no_api_key(service, browser):
    upload(service, "avatars/cat.png", b"\x89PNG", content_type="image/png")
    upload(service, "locked/secret.txt", b"secret")
    assert browser.get(f"{OBJECTS}/public/avatars/cat.png").data == b"\x89PNG"
    assert_storage_error(browser.get(f"{OBJECTS}/public/locked/secret.txt"), 404, "NoSuchKey")
    assert browser.get(f"{OBJECTS}/avatars/cat.png").status_code == 401  # not a public URL
    signed = service.post(f"{OBJECTS}/sign/locked/secret.txt", json={"expiresIn": 60}).json["signedURL"]
    assert browser.get(f"/storage/v1{signed}").data == b"secret"
    token = signed.partition("token=")[2]
    assert_storage_error(
        browser.get(f"{OBJECTS}/sign/avatars/cat.png?token={token}"), 400, "InvalidSignature"
    )
    assert_storage_error(browser.get(f"{OBJECTS}/sign/locked/secret.txt?token=x{token}"), 400, "InvalidJWT")
    many = service.post(f"{OBJECTS}/sign/locked", json={"expiresIn": "60", "paths": ["secret.txt", "nope"]})
    assert (
        many.json[0]["error"] is None
        and browser.get(f"/storage/v1{many.json[0]['signedURL']}").status_code == 200
    )
    assert many.json[1]["signedURL"] is None and many.json[1]["error"]


def test_signed_urls_expire(service, browser, monkeypatch):
    from storage import signing

    upload(service, "locked/old.txt")
    signed = service.post(f"{OBJECTS}/sign/locked/old.txt", json={"expiresIn": 60}).json["signedURL"]
    later = signing.now() + 61
    monkeypatch.setattr(signing, "now", lambda: later)
    monkeypatch.setattr("jwt.api_jwt.datetime", _Clock(later))
    assert_storage_error(browser.get(f"/storage/v1{signed}"), 400, "InvalidJWT")


class _Clock:
    """pyjwt's datetime, moved to `at`."""

    def __init__(self, at):
        import datetime

        self.at = datetime.datetime.fromtimestamp(at, datetime.UTC)
        self.real = datetime.datetime

    def now(self, tz=None):
        return self.at

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_signed_upload_url_takes_one_object_without_credentials(service, browser, user_token, api):
    ann = user_token("ann@example.com")
    made = api.post(f"{OBJECTS}/upload/sign/private/ann/doc.txt", token=ann)
    assert made.status_code == 200 and made.json["url"].startswith(
        "/object/upload/sign/private/ann/doc.txt?token="
    )
    put = browser.put(
        f"/storage/v1{made.json['url']}", data=b"signed", headers={"Content-Type": "text/plain"}
    )
    assert put.status_code == 200 and put.json["Key"] == "private/ann/doc.txt"
    assert api.get(f"{OBJECTS}/private/ann/doc.txt", token=ann).data == b"signed"  # ann owns it
    again = browser.put(
        f"/storage/v1{made.json['url']}", data=b"again", headers={"Content-Type": "text/plain"}
    )
    assert_storage_error(again, 409, "KeyAlreadyExists")
    token = made.json["token"]
    other = browser.put(f"{OBJECTS}/upload/sign/private/ann/other.txt?token={token}", data=b"x")
    assert_storage_error(other, 400, "InvalidSignature")
    download = service.post(f"{OBJECTS}/sign/private/ann/doc.txt", json={"expiresIn": 60}).json["signedURL"]
    as_upload = browser.put(
        f"{OBJECTS}/upload/sign/private/ann/doc.txt?{download.partition('?')[2]}", data=b"x"
    )
    assert_storage_error(as_upload, 400, "InvalidSignature")
    assert_storage_error(api.post(f"{OBJECTS}/upload/sign/private/x.txt"), 401, "AccessDenied")


def test_multipart_uploads_and_user_metadata(service, api):
    form = {
        "cacheControl": "3600",
        "metadata": json.dumps({"album": "cats"}),
        "": (io.BytesIO(b"meow"), "c.txt", "text/plain"),
    }
    done = service.post(f"{OBJECTS}/avatars/c.txt", data=form, content_type="multipart/form-data")
    assert done.status_code == 200, done.json
    got = api.get(f"{OBJECTS}/avatars/c.txt")
    assert got.data == b"meow" and got.headers["Cache-Control"] == "max-age=3600"
    assert api.get(f"{OBJECTS}/info/avatars/c.txt").json["metadata"] == {"album": "cats"}
    encoded = base64.b64encode(json.dumps({"k": 1}).encode()).decode()
    upload(service, "avatars/d.txt", **{"x-metadata": encoded})
    assert api.get(f"{OBJECTS}/info/avatars/d.txt").json["metadata"] == {"k": 1}
    assert_storage_error(upload(service, "avatars/e.txt", **{"x-metadata": "not base64!"}), 400)
    empty = service.post(
        f"{OBJECTS}/avatars/f.txt", data={"cacheControl": "1"}, content_type="multipart/form-data"
    )
    assert_storage_error(empty, 400, "InvalidRequest")


@pytest.mark.parametrize("metadata", ['{"n": 1e999}', '{"a": [-1e999]}', '{"n": 1E400}'])
def test_metadata_with_a_number_too_large_for_a_double_is_a_400(service, api, metadata):
    """It was stored as `Infinity` on SQLite (the object's info then invalid JSON) and a 503 on
    MariaDB; it is refused as NaN is, in the header and in a form's field, and nothing is stored."""
    encoded = base64.b64encode(metadata.encode()).decode()
    assert_storage_error(upload(service, "avatars/huge.txt", **{"x-metadata": encoded}), 400)
    form = {"metadata": metadata, "": (io.BytesIO(b"meow"), "c.txt", "text/plain")}
    posted = service.post(f"{OBJECTS}/avatars/huge.txt", data=form, content_type="multipart/form-data")
    assert_storage_error(posted, 400)
    assert api.get(f"{OBJECTS}/info/avatars/huge.txt").status_code in (400, 404)


def test_upsert_replaces_and_frees_the_old_bytes(service, api, storage_root):
    upload(service, "avatars/a.txt", b"one")
    assert_storage_error(upload(service, "avatars/a.txt", b"two"), 409, "KeyAlreadyExists")
    assert upload(service, "avatars/a.txt", b"two", **{"x-upsert": "true"}).status_code == 200
    assert api.get(f"{OBJECTS}/avatars/a.txt").data == b"two" and len(stored_files(storage_root)) == 1
    replaced = service.put(f"{OBJECTS}/avatars/a.txt", data=b"three", headers={"Content-Type": "text/plain"})
    assert replaced.status_code == 200 and api.get(f"{OBJECTS}/avatars/a.txt").data == b"three"
    assert len(stored_files(storage_root)) == 1
    missing = service.put(f"{OBJECTS}/avatars/none.txt", data=b"x", headers={"Content-Type": "text/plain"})
    assert_storage_error(missing, 404, "NoSuchKey")


def test_size_and_type_limits(service, storage_root):
    too_large = upload(service, "avatars/big.txt", b"x" * 1001)  # "1KB" is 1000 bytes
    assert_storage_error(too_large, 413, "EntityTooLarge")
    assert too_large.json == {
        "statusCode": "413",
        "code": "EntityTooLarge",
        "error": "Payload too large",
        "message": "The object exceeded the maximum allowed size",
    }
    assert upload(service, "avatars/fits.txt", b"x" * 1000).status_code == 200
    assert_storage_error(
        upload(service, "avatars/a.pdf", content_type="application/pdf"), 415, "InvalidMimeType"
    )
    assert upload(service, "avatars/a.webp", content_type="image/webp").status_code == 200  # image/*
    assert_storage_error(upload(service, "avatars/x.txt", content_type="not a type"), 400)
    assert leftovers(storage_root) == [] and len(stored_files(storage_root)) == 2


def test_the_global_limit_applies_to_every_bucket(make_app, tables_config, storage_root, service_key):
    client = Api(make_app(TABLES_CONFIG=str(tables_config), STORAGE_FILE_SIZE_LIMIT=10), service_key)
    assert_storage_error(upload(client, "locked/big.txt", b"x" * 11), 413)
    assert upload(client, "locked/small.txt", b"x" * 10).status_code == 200


def test_a_cut_off_upload_leaves_nothing(service, storage_root):
    class Cut(io.RawIOBase):
        sent = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.sent > 300_000:
                raise ClientDisconnected()
            self.sent += len(buffer)
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    environ = EnvironBuilder(
        f"{OBJECTS}/locked/cut.bin",
        method="POST",
        headers={"apikey": service.key, "Content-Type": "text/plain"},
    ).get_environ()
    environ.update({"wsgi.input": Cut(), "CONTENT_LENGTH": "900000"})
    body, status, _ = run_wsgi_app(service.app, environ, buffered=True)
    assert status.startswith("400") and json.loads(b"".join(body))["statusCode"] == "400"
    assert leftovers(storage_root) == [] and stored_files(storage_root) == []
    assert service.post(f"{OBJECTS}/list/locked", json={"prefix": ""}).json == []


def test_html_and_svg_are_never_pages_of_the_api(service, api):
    upload(service, "locked/x.html", b"<script>alert(1)</script>", content_type="text/html")
    upload(service, "locked/x.svg", b"<svg onload=alert(1)>", content_type="image/svg+xml")
    for name in ("x.html", "x.svg"):
        got = service.get(f"{OBJECTS}/locked/{name}")
        assert got.headers["Content-Disposition"].startswith("attachment")
        assert "sandbox" in got.headers["Content-Security-Policy"]


def test_a_download_under_uvicorn_is_handed_over_in_large_blocks(service, app, service_key):
    """`python wsgi.py` serves Flask through a2wsgi, which passes each block a response yields from
    its thread to the event loop: a 1 MB download goes in four blocks, not werkzeug's 128 of 8 KB."""
    from runtime import asgi

    payload = bytes(range(256)) * 4096
    assert (
        upload(service, "private/big.bin", payload, content_type="application/octet-stream").status_code
        == 200
    )
    sent = asgi_get(app, f"{OBJECTS}/private/big.bin", [(b"apikey", service_key.encode())])
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    blocks = [message["body"] for message in sent[1:] if message["body"]]
    assert b"".join(blocks) == payload and [len(block) for block in blocks] == [asgi.FILE_BLOCK] * 4


def test_a_public_url_follows_the_bucket_row_at_once(service, browser, api):
    """The public download's one statement reads the bucket's public flag as it is now, and a
    bucket id that cannot exist answers as a missing object."""
    assert service.post("/storage/v1/bucket", json={"id": "docs", "public": True}).status_code == 200
    upload(service, "docs/a.txt", b"a")
    assert browser.get(f"{OBJECTS}/public/docs/a.txt").data == b"a"
    assert service.put("/storage/v1/bucket/docs", json={"public": False}).status_code == 200
    assert_storage_error(browser.get(f"{OBJECTS}/public/docs/a.txt"), 404, "NoSuchKey")
    assert_storage_error(api.get(f"{OBJECTS}/docs/a.txt"), 404, "NoSuchKey")  # made by the API: no rule
    assert service.get(f"{OBJECTS}/docs/a.txt").data == b"a"
    for bucket in ("-", "a" * 64, "d%27ocs", "docs%20OR%201=1", ".docs"):
        assert_storage_error(browser.get(f"{OBJECTS}/public/{bucket}/a.txt"), 404, "NoSuchKey")
        assert_storage_error(service.get(f"{OBJECTS}/{bucket}/a.txt"), 404, "NoSuchKey")


def test_the_owner_rule_keeps_users_to_their_objects(api, user_token, app):
    ann, bob = user_token("ann@example.com"), user_token("bob@example.com")
    assert_storage_error(upload(api, "avatars/anon.txt"), 401, "AccessDenied")
    assert upload(api, "avatars/ann.txt", b"ann's", token=ann).status_code == 200
    assert api.get(f"{OBJECTS}/avatars/ann.txt").data == b"ann's"  # select = anon
    denied = upload(api, "avatars/ann.txt", b"bob's", token=bob, **{"x-upsert": "true"})
    assert_storage_error(denied, 403, "AccessDenied")
    put = api.put(f"{OBJECTS}/avatars/ann.txt", data=b"x", token=bob, headers={"Content-Type": "text/plain"})
    assert_storage_error(put, 404, "NoSuchKey")
    assert api.delete(f"{OBJECTS}/avatars", json={"prefixes": ["ann.txt"]}, token=bob).json == []
    moved = api.post(
        f"{OBJECTS}/move",
        json={"bucketId": "avatars", "sourceKey": "ann.txt", "destinationKey": "b.txt"},
        token=bob,
    )
    assert_storage_error(moved, 404, "NoSuchKey")
    assert api.get(f"{OBJECTS}/avatars/ann.txt").data == b"ann's"
    # In a bucket whose select rule is owner, another user's object is exactly a missing one.
    upload(api, "private/ann/secret.txt", b"s", token=ann)
    hidden = api.get(f"{OBJECTS}/private/ann/secret.txt", token=bob)
    missing = api.get(f"{OBJECTS}/private/ann/none.txt", token=bob)
    assert hidden.status_code == missing.status_code == 404 and hidden.json == missing.json
    assert api.get(f"{OBJECTS}/info/private/ann/secret.txt", token=bob).json == missing.json
    assert api.post(f"{OBJECTS}/list/private", json={"prefix": "ann"}, token=bob).json == []
    assert [
        e["name"] for e in api.post(f"{OBJECTS}/list/private", json={"prefix": "ann"}, token=ann).json
    ] == ["secret.txt"]
    signed = api.post(f"{OBJECTS}/sign/private/ann/secret.txt", json={"expiresIn": 60}, token=bob)
    assert_storage_error(signed, 404, "NoSuchKey")
    removed = api.delete(f"{OBJECTS}/avatars", json={"prefixes": ["ann.txt"]}, token=ann).json
    assert [o["name"] for o in removed] == ["ann.txt"] and api.get(
        f"{OBJECTS}/avatars/ann.txt"
    ).status_code == 404


def test_a_bucket_without_rules_is_the_service_keys(api, user_token, service):
    upload(service, "locked/a.txt")
    token = user_token("ann@example.com")
    assert api.get(f"{OBJECTS}/locked/a.txt", token=token).status_code == 404
    assert_storage_error(upload(api, "locked/b.txt", token=token), 403, "AccessDenied")
    assert api.post(f"{OBJECTS}/list/locked", json={}).json == []


def test_listing_folders_paging_sorting_and_search(service):
    for name in (
        "b.txt",
        "a.txt",
        "Cat.txt",
        "docs/one.txt",
        "docs/two.txt",
        "docs/deep/x.txt",
        "pics/p.txt",
    ):
        upload(service, f"locked/{name}")

    def names(**body):
        listed = service.post(f"{OBJECTS}/list/locked", json=body)
        assert listed.status_code == 200, listed.json
        return [(entry["name"], entry["id"] is None) for entry in listed.json]

    assert names(prefix="") == [
        ("Cat.txt", False),
        ("a.txt", False),
        ("b.txt", False),
        ("docs", True),
        ("pics", True),
    ]
    assert names(prefix="docs") == [("deep", True), ("one.txt", False), ("two.txt", False)]
    assert names(prefix="docs/") == names(prefix="docs")
    assert names(prefix="", limit=2, offset=1) == [("a.txt", False), ("b.txt", False)]
    assert names(prefix="docs", sortBy={"column": "name", "order": "desc"})[0] == ("two.txt", False)
    assert names(prefix="", search="c") == [("Cat.txt", False)]
    assert names(prefix="nothing") == []
    for body in ({"limit": 0}, {"limit": "x"}, {"sortBy": {"column": "size"}}, {"prefix": 5}, {"offset": -1}):
        assert_storage_error(service.post(f"{OBJECTS}/list/locked", json=body), 400)
    assert_storage_error(service.post(f"{OBJECTS}/list/nope", json={}), 404, "NoSuchBucket")


def test_move_copy_and_remove(service, storage_root):
    upload(service, "locked/a.txt", b"A")
    upload(service, "locked/b.txt", b"B")
    body = {"bucketId": "locked", "sourceKey": "a.txt", "destinationKey": "dir/a.txt"}
    assert service.post(f"{OBJECTS}/move", json=body).json["message"] == "Successfully moved"
    assert service.get(f"{OBJECTS}/locked/dir/a.txt").data == b"A"
    assert service.get(f"{OBJECTS}/locked/a.txt").status_code == 404
    taken = {"bucketId": "locked", "sourceKey": "dir/a.txt", "destinationKey": "b.txt"}
    assert_storage_error(service.post(f"{OBJECTS}/move", json=taken), 409, "KeyAlreadyExists")
    copied = service.post(
        f"{OBJECTS}/copy", json={**taken, "destinationBucket": "private", "destinationKey": "c.txt"}
    )
    assert copied.json["Key"] == "private/c.txt" and service.get(f"{OBJECTS}/private/c.txt").data == b"A"
    assert len(stored_files(storage_root)) == 3
    assert_storage_error(service.post(f"{OBJECTS}/copy", json=taken), 409)
    assert service.post(f"{OBJECTS}/copy", json=taken, headers={"x-upsert": "true"}).status_code == 200
    assert service.get(f"{OBJECTS}/locked/b.txt").data == b"A" and len(stored_files(storage_root)) == 3
    removed = service.delete(f"{OBJECTS}/locked", json={"prefixes": ["b.txt", "dir/a.txt", "none"]})
    assert sorted(o["name"] for o in removed.json) == ["b.txt", "dir/a.txt"]
    assert len(stored_files(storage_root)) == 1
    assert_storage_error(service.post(f"{OBJECTS}/move", json={"bucketId": "locked"}), 400)
    assert_storage_error(service.delete(f"{OBJECTS}/locked", json={"prefixes": "b.txt"}), 400)


BAD_NAMES = ["a/../b.txt", "%2e%2e/x", "%2E%2E%2Fetc%2Fpasswd", "..", "./a", "a//b", "a%00b", "a%5Cb", "a\\b",
             "x" * 1000, "%2Fabs", "a/", "%C0%AE%C0%AE/x", "%FF"]  # fmt: skip


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_that_try_to_leave_the_root_are_400s(service, name, storage_root):
    for response in (
        upload(service, f"locked/{name}"),
        service.get(f"{OBJECTS}/locked/{name}"),
        service.get(f"{OBJECTS}/public/locked/{name}"),
        service.post(f"{OBJECTS}/sign/locked/{name}", json={"expiresIn": 60}),
    ):
        assert response.status_code in (400, 404), response.get_data(as_text=True)
        assert_storage_error(response, response.status_code)
    decoded = unquote(name)  # as the path reaches the view
    move = {"bucketId": "locked", "sourceKey": "a", "destinationKey": decoded}
    assert_storage_error(service.post(f"{OBJECTS}/move", json=move), 400, "InvalidKey")
    assert stored_files(storage_root) == []


def test_errors_keep_the_storage_shape(service, api, browser):
    assert_storage_error(service.get("/storage/v1/nothing/here"), 404)
    assert_storage_error(service.get(f"{OBJECTS}/nobucket/a.txt"), 404, "NoSuchKey")
    assert_storage_error(upload(service, "nobucket/a.txt"), 404, "NoSuchBucket")
    dead = api.get(f"{OBJECTS}/avatars/a.txt", token="not-a-token")
    assert_storage_error(dead, 401, "InvalidJWT")
    assert browser.post(f"{OBJECTS}/list/avatars", json={}).status_code == 401
    assert_storage_error(
        service.post(f"{OBJECTS}/list/avatars", data="[", content_type="application/json"), 400
    )


def test_a_browser_preflight_gets_cors_headers(app):
    preflight = app.test_client().options(
        f"{OBJECTS}/avatars/a.png",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, apikey, x-upsert, x-client-info, cache-control",
        },
    )
    assert preflight.status_code == 200 and preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "x-upsert" in preflight.headers["Access-Control-Allow-Headers"].lower()


def test_a_disk_that_cannot_be_written_is_a_503(make_app, tables_config, tmp_path, service_key):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    client = Api(make_app(TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(blocked)), service_key)
    assert_storage_error(upload(client, "locked/a.txt"), 503)
    assert client.post(f"{OBJECTS}/list/locked", json={}).json == []


@pytest.mark.parametrize(
    "body",
    ["[" * 100_000, '{"prefix": "\\ud800"}', '{"limit": 1e999}', '{"limit": NaN}',
     '{"sortBy": {"column": ["x"]}}', "[]", '"text"', "{", '{"prefix": "a\\u0000"}'],
)  # fmt: skip
def test_no_body_makes_a_5xx(service, body):
    for path in (
        "/list/locked",
        "/move",
        "/copy",
        "/sign/locked",
        "/sign/locked/a.txt",
        "/upload/sign/locked/a.txt",
    ):
        response = service.post(f"{OBJECTS}{path}", data=body, content_type="application/json")
        assert response.status_code < 500, response.get_data(as_text=True)
    assert service.delete(f"{OBJECTS}/locked", data=body, content_type="application/json").status_code == 400


def test_names_in_any_script(service, api):
    name = "😀/ünïcödé 名前.txt"
    assert upload(service, f"locked/{name}").status_code == 200
    assert service.get(f"{OBJECTS}/locked/{name}").data == b"hello"
    listed = service.post(f"{OBJECTS}/list/locked", json={"prefix": "😀"}).json
    assert [entry["name"] for entry in listed] == ["ünïcödé 名前.txt"]
    assert upload(service, f"locked/{'é' * 512}").status_code == 200  # 1024 UTF-8 bytes
    assert_storage_error(upload(service, f"locked/{'é' * 513}"), 400, "InvalidKey")


def test_listing_is_decided_in_the_sql_as_it_was_in_python(service, monkeypatch):
    """Files and folders of one name, case in prefixes, wildcards in a search, folders around the
    files when sorted by a time: the listing the database pages is the one Python used to sort."""
    from storage import clock

    moments = iter(range(1, 100))
    real_now = clock.now
    monkeypatch.setattr(clock, "now", lambda: real_now().replace(microsecond=0, second=next(moments) % 60))
    for name in ("a", "a/inner.txt", "Docs/x.txt", "docs/y.txt", "docs/a_b.txt", "docs/axb.txt", "z.txt"):
        upload(service, f"locked/{name}")

    def names(**body):
        listed = service.post(f"{OBJECTS}/list/locked", json=body)
        assert listed.status_code == 200, listed.json
        return [(entry["name"], entry["id"] is None) for entry in listed.json]

    assert names() == [("Docs", True), ("a", True), ("a", False), ("docs", True), ("z.txt", False)]
    assert names(prefix="docs") == [("a_b.txt", False), ("axb.txt", False), ("y.txt", False)]
    assert names(prefix="docs", search="A_") == [("a_b.txt", False)]
    by_time = names(sortBy={"column": "created_at", "order": "asc"})
    assert by_time == [("Docs", True), ("a", True), ("docs", True), ("a", False), ("z.txt", False)]
    latest = names(sortBy={"column": "updated_at", "order": "desc"}, limit=3)
    assert latest == [("z.txt", False), ("a", False), ("docs", True)]
    assert names(offset=4) == [("z.txt", False)] and names(offset=5) == []
