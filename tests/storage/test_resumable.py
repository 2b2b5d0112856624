"""Resumable uploads (TUS 1.0 at /storage/v1/upload/resumable) through plain HTTP, on SQLite and
MariaDB: chunks, offsets, the object appearing only when complete, and every check of a direct
upload at creation and at the last chunk; uploads that belong to who began them, forged and replayed
ids, concurrent chunks, termination and expiry."""

import base64
import datetime
import io
import threading
import uuid
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from extensions import db
from storage import clock, resumable

TUS = "/storage/v1/upload/resumable"
SIGNED = f"{TUS}/sign"
VERSION = {"Tus-Resumable": "1.0.0"}
CHUNK = "application/offset+octet-stream"


@pytest.fixture
def tables_config(tmp_path, backend):
    mine = "name LIKE CONCAT(:uid, '/%')" if backend == "mysql" else "name LIKE :uid || '/%'"
    path = tmp_path / "tables.toml"
    path.write_text(f"""
[buckets.avatars]
public = true
file_size_limit = "1KB"
allowed_mime_types = ["image/*", "text/plain"]
select = "anon"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.private]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.locked]

[buckets.docs]
select = "authenticated"
insert = "authenticated"
update = "authenticated"
delete = "authenticated"

[buckets.docs.policies]
select = "{mine}"
insert = "{mine}"
update = "{mine}"
delete = "{mine}"
""")
    return path


def metadata(**pairs):
    return ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in pairs.items())


def begin(
    client, bucket, name, length, token=None, content_type="text/plain", headers=None, path=TUS, **more
):
    sent = {
        **VERSION,
        "Upload-Length": str(length),
        "Upload-Metadata": metadata(bucketName=bucket, objectName=name, contentType=content_type, **more),
        **(headers or {}),
    }
    return client.post(path, token=token, headers=sent)


def url(response):
    assert response.status_code == 201, response.get_data(as_text=True)
    return urlsplit(response.headers["Location"]).path


def chunk(client, where, offset, data, token=None, **headers):
    sent = {**VERSION, "Upload-Offset": str(offset), "Content-Type": CHUNK, **headers}
    return client.patch(where, token=token, data=data, headers=sent)


def offset_of(client, where, token=None):
    response = client.head(where, token=token, headers=VERSION)
    assert response.status_code == 200, response.status_code
    return int(response.headers["Upload-Offset"])


def parts_on_disk(storage_root):
    return [p for p in (storage_root / "uploads").rglob("*") if p.is_file()]


@pytest.fixture
def people(api):
    found = {}
    for name in ("ann", "bob"):
        session = api.sign_up(email=f"{name}@example.com")
        found[name] = (session["user"]["id"], session["access_token"])
    return found


def test_options_says_what_is_offered_without_a_key(browser):
    response = browser.request("OPTIONS", TUS)
    assert response.status_code == 204
    assert response.headers["Tus-Version"] == "1.0.0" and response.headers["Tus-Resumable"] == "1.0.0"
    assert set(response.headers["Tus-Extension"].split(",")) >= {"creation", "termination", "expiration"}
    assert int(response.headers["Tus-Max-Size"]) == 50 * 1024 * 1024


def test_chunks_make_the_object_only_when_complete(api, people, storage_root):
    _, ann = people["ann"]
    created = begin(api, "private", "big/report.txt", 11, ann, cacheControl="3600", metadata='{"k": "v"}')
    where = url(created)
    assert created.headers["Tus-Resumable"] == "1.0.0" and "GMT" in created.headers["Upload-Expires"]
    head = api.head(where, token=ann, headers=VERSION)
    assert head.headers["Upload-Offset"] == "0" and head.headers["Upload-Length"] == "11"
    assert head.headers["Cache-Control"] == "no-store" and "bucketName" in head.headers["Upload-Metadata"]

    first = chunk(api, where, 0, b"hello ", ann)
    assert first.status_code == 204 and first.headers["Upload-Offset"] == "6"
    assert "Tus-Complete" not in first.headers
    assert api.get("/storage/v1/object/info/private/big/report.txt", token=ann).status_code == 404
    assert len(parts_on_disk(storage_root)) == 1

    last = chunk(api, where, 6, b"world", ann)
    assert (
        last.status_code == 204
        and last.headers["Upload-Offset"] == "11"
        and last.headers["Tus-Complete"] == "1"
    )
    got = api.get("/storage/v1/object/private/big/report.txt", token=ann)
    assert got.status_code == 200 and got.data == b"hello world"
    assert got.headers["Cache-Control"] == "max-age=3600" and got.mimetype == "text/plain"
    info = api.get("/storage/v1/object/info/private/big/report.txt", token=ann).json
    assert info["metadata"] == {"k": "v"} and info["size"] == 11
    assert parts_on_disk(storage_root) == [] and list((storage_root / ".tmp").iterdir()) == []
    # Replayed: the finished upload is gone, and its id does nothing.
    assert api.head(where, token=ann, headers=VERSION).status_code == 404
    assert chunk(api, where, 11, b"!", ann).status_code == 404
    assert chunk(api, where, 6, b"WORLD", ann).status_code == 404
    assert api.get("/storage/v1/object/private/big/report.txt", token=ann).data == b"hello world"


def test_creation_with_data_and_an_empty_file(service):
    created = service.post(
        TUS,
        data=b"all at once",
        headers={
            **VERSION,
            "Upload-Length": "11",
            "Content-Type": CHUNK,
            "Upload-Metadata": metadata(bucketName="locked", objectName="once.txt", contentType="text/plain"),
        },
    )
    assert created.status_code == 201 and created.headers["Upload-Offset"] == "11"
    assert service.get("/storage/v1/object/locked/once.txt").data == b"all at once"
    empty = begin(service, "locked", "empty.txt", 0)
    assert empty.status_code == 201 and empty.headers["Upload-Offset"] == "0"
    got = service.get("/storage/v1/object/locked/empty.txt")
    assert got.status_code == 200 and got.data == b""


def test_offsets_that_do_not_match_are_a_conflict(api, people):
    _, ann = people["ann"]
    where = url(begin(api, "private", "a.txt", 10, ann))
    assert chunk(api, where, 3, b"abc", ann).status_code == 409
    assert chunk(api, where, 0, b"abcde", ann).status_code == 204
    again = chunk(api, where, 0, b"XXXXX", ann)
    assert (
        again.status_code == 409
        and again.mimetype == "text/plain"
        and again.headers["Tus-Resumable"] == "1.0.0"
    )
    assert chunk(api, where, 4, b"XXXXX", ann).status_code == 409
    assert offset_of(api, where, ann) == 5
    assert chunk(api, where, 5, b"fghij", ann).status_code == 204
    assert api.get("/storage/v1/object/private/a.txt", token=ann).data == b"abcdefghij"


def test_a_chunk_never_goes_past_the_declared_length(api, people, storage_root):
    _, ann = people["ann"]
    where = url(begin(api, "private", "a.txt", 5, ann))
    assert chunk(api, where, 0, b"abc", ann).status_code == 204
    assert chunk(api, where, 3, b"defgh", ann).status_code == 413
    # Without a Content-Length (a chunked body), counted as it comes.
    streamed = api.patch(
        where,
        token=ann,
        input_stream=io.BytesIO(b"defgh"),
        headers={**VERSION, "Upload-Offset": "3", "Content-Type": CHUNK},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert streamed.status_code == 413
    assert offset_of(api, where, ann) == 3 and len(parts_on_disk(storage_root)) == 1
    assert chunk(api, where, 3, b"de", ann).status_code == 204
    assert api.get("/storage/v1/object/private/a.txt", token=ann).data == b"abcde"


def test_an_upload_is_only_its_creators(api, service, people):
    _, ann = people["ann"]
    _, bob = people["bob"]
    where = url(begin(api, "private", "mine.txt", 6, ann))
    assert chunk(api, where, 0, b"ann", ann).status_code == 204
    for token, client in ((bob, api), (None, api), (None, service)):
        assert client.head(where, token=token, headers=VERSION).status_code == 404
        assert chunk(client, where, 3, b"BOB", token).status_code == 404
        assert client.delete(where, token=token, headers=VERSION).status_code == 404
    assert offset_of(api, where, ann) == 3
    assert chunk(api, where, 3, b"ann", ann).status_code == 204
    assert api.get("/storage/v1/object/private/mine.txt", token=ann).data == b"annann"


def test_forged_ids_do_nothing(api, people):
    _, ann = people["ann"]
    where = url(begin(api, "private", "real.txt", 6, ann))
    version = base64.urlsafe_b64decode(where.rsplit("/", 1)[1] + "==").decode().rsplit("/", 1)[1]
    forged = [
        str(uuid.uuid4()),
        base64.urlsafe_b64encode(f"private/real.txt/{uuid.uuid4()}".encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(f"private/other.txt/{version}".encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(f"avatars/real.txt/{version}".encode()).decode().rstrip("="),
        "%00", "..", "!!!!", "A" * 5000,
    ]  # fmt: skip
    for upload_id in forged:
        target = f"{TUS}/{upload_id}"
        assert api.head(target, token=ann, headers=VERSION).status_code in (404,), upload_id
        assert chunk(api, target, 0, b"forged", ann).status_code == 404
        assert api.delete(target, token=ann, headers=VERSION).status_code == 404
    assert api.get("/storage/v1/object/info/private/real.txt", token=ann).status_code == 404
    assert offset_of(api, where, ann) == 0


@pytest.mark.parametrize(
    ("bucket", "name", "length", "content_type", "who", "status"),
    [
        ("nowhere", "a.txt", 5, "text/plain", "ann", 404),
        ("private", "a.txt", 5, "text/plain", "anon", 401),
        ("locked", "a.txt", 5, "text/plain", "ann", 403),
        ("avatars", "a.pdf", 5, "application/pdf", "ann", 415),
        ("avatars", "a.txt", 1025, "text/plain", "ann", 413),
        ("private", "a.txt", 50 * 1024 * 1024 + 1, "text/plain", "ann", 413),
        ("private", "../a.txt", 5, "text/plain", "ann", 400),
        ("private", "a//b.txt", 5, "text/plain", "ann", 400),
        ("private", "a\x01.txt", 5, "text/plain", "ann", 400),
        ("private", "a\\b.txt", 5, "text/plain", "ann", 400),
        ("private", "a.txt", 5, "text/plain, text/html", "ann", 400),
        ("docs", "someone-else/a.txt", 5, "text/plain", "ann", 403),
        ("..", "a.txt", 5, "text/plain", "ann", 404),
        ("private/../locked", "a.txt", 5, "text/plain", "ann", 404),
        ("private", "/etc/passwd", 5, "text/plain", "ann", 400),
        ("private", "a/" * 300 + "b", 5, "text/plain", "ann", 400),
    ],
)
def test_creation_is_held_to_what_an_upload_is(api, people, bucket, name, length, content_type, who, status):
    token = people[who][1] if who in people else None
    response = begin(api, bucket, name, length, token, content_type)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "text/plain" and response.get_data(as_text=True)
    assert "Location" not in response.headers


def test_policies_at_creation_and_the_last_chunk(api, people):
    ann_id, ann = people["ann"]
    where = url(begin(api, "docs", f"{ann_id}/a.txt", 4, ann))
    assert chunk(api, where, 0, b"ab", ann).status_code == 204
    assert chunk(api, where, 2, b"cd", ann).status_code == 204
    assert api.get(f"/storage/v1/object/docs/{ann_id}/a.txt", token=ann).data == b"abcd"


@pytest.mark.parametrize(
    "headers",
    [
        {"Tus-Resumable": "0.2.2"},
        {"Upload-Length": "-1"},
        {"Upload-Length": "5.0"},
        {"Upload-Length": "٥"},
        {"Upload-Length": "99999999999999999999"},
        {"Upload-Length": ""},
        {"Upload-Defer-Length": "1"},
        {"Upload-Concat": "partial"},
        {"Upload-Metadata": "bucketName cHJpdmF0ZQ=="},
        {"Upload-Metadata": "bucketName !!!,objectName YS50eHQ="},
        {"Upload-Metadata": "bucketName cHJpdmF0ZQ==,bucketName cHJpdmF0ZQ==,objectName YS50eHQ="},
        {"Upload-Metadata": "bucketName cHJpdmF0ZQ==,objectName /w=="},
        {"Upload-Metadata": "bucketName cHJpdmF0ZQ==,objectName YS50eHQ=,metadata W10="},
        {"Upload-Metadata": "bucketName cHJpdmF0ZQ==,objectName YS50eHQ=,cacheControl YQpi"},
        {
            "Upload-Metadata": metadata(
                bucketName="private", objectName="a.txt", metadata='{"a": "' + "x" * 9000 + '"}'
            )
        },
        {"Upload-Metadata": "x" * 20000},
    ],
)
def test_bad_creation_headers_are_400s(api, people, headers):
    _, ann = people["ann"]
    sent = {
        **VERSION,
        "Upload-Length": "5",
        "Upload-Metadata": metadata(bucketName="private", objectName="a.txt"),
    }
    response = api.post(TUS, token=ann, headers={**sent, **headers})
    expected = 412 if "Tus-Resumable" in headers else 400
    assert response.status_code == expected, response.get_data(as_text=True)
    if expected == 412:
        assert response.headers["Tus-Version"] == "1.0.0"


def test_bad_chunks_are_refused(api, people):
    _, ann = people["ann"]
    where = url(begin(api, "private", "a.txt", 5, ann))
    assert chunk(api, where, 0, b"abc", ann, **{"Content-Type": "text/plain"}).status_code == 415
    assert chunk(api, where, "x", b"abc", ann).status_code == 400
    assert chunk(api, where, -1, b"abc", ann).status_code == 400
    assert (
        api.patch(
            where, token=ann, data=b"abc", headers={"Upload-Offset": "0", "Content-Type": CHUNK}
        ).status_code
        == 412
    )
    assert offset_of(api, where, ann) == 0


def test_the_last_chunk_is_checked_again(api, service, people):
    _, ann = people["ann"]
    where = url(begin(api, "private", "race.txt", 4, ann))
    assert chunk(api, where, 0, b"ab", ann).status_code == 204
    # Meanwhile the name was taken: the upload (without x-upsert) cannot replace it.
    assert api.post("/storage/v1/object/private/race.txt", token=ann, data=b"first",
                    headers={"Content-Type": "text/plain"}).status_code == 200  # fmt: skip
    assert chunk(api, where, 2, b"cd", ann).status_code == 409
    assert api.get("/storage/v1/object/private/race.txt", token=ann).data == b"first"
    assert offset_of(api, where, ann) == 2  # still where it was: the chunk may be sent again

    # A bucket whose limit was lowered since the upload began.
    assert service.post("/storage/v1/bucket", json={"name": "big"}).status_code == 200
    big = url(begin(service, "big", "a.bin", 2000))
    assert chunk(service, big, 0, b"x" * 1000).status_code == 204
    assert service.put("/storage/v1/bucket/big", json={"file_size_limit": 1500}).status_code == 200
    assert chunk(service, big, 1000, b"y" * 1000).status_code == 413
    assert service.get("/storage/v1/object/info/big/a.bin").status_code == 404


def test_upsert_needs_update_over_an_existing_object(api, people):
    _, ann = people["ann"]
    _, bob = people["bob"]
    assert api.post("/storage/v1/object/avatars/face.txt", token=ann, data=b"ann's",
                    headers={"Content-Type": "text/plain"}).status_code == 200  # fmt: skip
    assert begin(api, "avatars", "face.txt", 3, bob).status_code == 409
    assert begin(api, "avatars", "face.txt", 3, bob, headers={"x-upsert": "true"}).status_code == 403
    mine = url(begin(api, "avatars", "face.txt", 3, ann, headers={"x-upsert": "true"}))
    assert chunk(api, mine, 0, b"new", ann).status_code == 204
    assert api.get("/storage/v1/object/public/avatars/face.txt").data == b"new"


def test_termination_removes_the_parts(api, people, storage_root):
    _, ann = people["ann"]
    where = url(begin(api, "private", "a.txt", 10, ann))
    assert chunk(api, where, 0, b"abc", ann).status_code == 204
    assert len(parts_on_disk(storage_root)) == 1
    assert api.delete(where, token=ann, headers=VERSION).status_code == 204
    assert parts_on_disk(storage_root) == []
    assert api.head(where, token=ann, headers=VERSION).status_code == 404
    assert chunk(api, where, 3, b"defghij", ann).status_code == 404
    assert api.get("/storage/v1/object/info/private/a.txt", token=ann).status_code == 404


def test_abandoned_uploads_expire_and_are_removed(api, people, storage_root, monkeypatch):
    _, ann = people["ann"]
    where = url(begin(api, "private", "a.txt", 10, ann))
    assert chunk(api, where, 0, b"abc", ann).status_code == 204
    later = clock.now() + datetime.timedelta(hours=1, seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert api.head(where, token=ann, headers=VERSION).status_code == 410
    assert chunk(api, where, 3, b"defghij", ann).status_code == 410
    assert len(parts_on_disk(storage_root)) == 1
    url(begin(api, "private", "b.txt", 10, ann))  # the next upload begun sweeps
    assert parts_on_disk(storage_root) == []
    assert api.head(where, token=ann, headers=VERSION).status_code == 404


def test_a_chunk_moves_the_expiry_on(api, people, monkeypatch):
    _, ann = people["ann"]
    start = clock.now()
    where = url(begin(api, "private", "a.txt", 10, ann))
    monkeypatch.setattr(clock, "now", lambda: start + datetime.timedelta(minutes=50))
    assert chunk(api, where, 0, b"abc", ann).status_code == 204
    monkeypatch.setattr(clock, "now", lambda: start + datetime.timedelta(minutes=90))
    assert offset_of(api, where, ann) == 3


def test_concurrent_chunks_cannot_corrupt_an_upload(app, api, people, storage_root):
    _, ann = people["ann"]
    for round_ in range(4):
        name = f"race-{round_}.txt"
        where = url(begin(api, "private", name, 8, ann))
        assert chunk(api, where, 0, b"0123", ann).status_code == 204
        results = []

        def send(data, results=results, where=where):
            client = type(api)(app, api.key)
            results.append((data, chunk(client, where, 4, data, ann).status_code))

        threads = [threading.Thread(target=send, args=(data,)) for data in (b"AAAA", b"BBBB", b"CCCC")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        won = [data for data, status in results if status == 204]
        assert len(won) == 1, results
        assert all(status in (404, 409) for _, status in results if status != 204), results
        assert api.get(f"/storage/v1/object/private/{name}", token=ann).data == b"0123" + won[0]
    assert parts_on_disk(storage_root) == []


# --- with a signed upload URL's token (x-signature) instead of credentials


def sign_upload(api, path, token, upsert=False):
    headers = {"x-upsert": "true"} if upsert else {}
    signed = api.post(f"/storage/v1/object/upload/sign/{path}", token=token, headers=headers)
    assert signed.status_code == 200, signed.json
    return signed.json["token"]


def test_a_signed_upload_url_begins_a_resumable_upload_as_its_signer(api, browser, people):
    ann_id, ann = people["ann"]
    signature = sign_upload(api, "private/ann/x.txt", ann)
    created = begin(browser, "private", "ann/x.txt", 6, path=SIGNED, headers={"x-signature": signature})
    where = url(created)
    assert where.startswith(f"{TUS}/sign/")
    sent = {"x-signature": signature}
    assert browser.head(where, headers={**VERSION, **sent}).headers["Upload-Offset"] == "0"
    assert chunk(browser, where, 0, b"abc", **sent).status_code == 204
    # The upload is the signer's: Ann may go on with her own token; without the token, nobody.
    assert chunk(api, f"{TUS}/{where.rsplit('/', 1)[1]}", 3, b"d", ann).status_code == 204
    assert chunk(browser, where, 4, b"ef").status_code == 400
    assert chunk(browser, where, 4, b"ef", **sent).status_code == 204
    got = api.get("/storage/v1/object/private/ann/x.txt", token=ann)  # select = owner: Ann's own
    assert got.status_code == 200 and got.data == b"abcdef"
    assert api.get("/storage/v1/object/info/private/ann/x.txt", token=people["bob"][1]).status_code == 404


def test_signed_resumable_uploads_refuse_a_bad_token(api, browser, people, monkeypatch):
    from storage import signing

    _, ann = people["ann"]
    _, bob = people["bob"]
    signature = sign_upload(api, "private/ann/x.txt", ann)
    download = api.post("/storage/v1/object/sign/private/ann/x.txt", token=ann, json={"expiresIn": 60})
    assert download.status_code == 404  # nothing to sign yet; an upload token is not a download one
    for sent in ({}, {"x-signature": "forged"}, {"x-signature": signature + "x"}):
        response = begin(browser, "private", "ann/x.txt", 6, path=SIGNED, headers=sent)
        assert response.status_code == 400, response.get_data(as_text=True)
    other = begin(browser, "private", "ann/other.txt", 6, path=SIGNED, headers={"x-signature": signature})
    assert other.status_code == 400 and "signature" in other.get_data(as_text=True).lower()
    # Bob's token for the same name is Bob's: Ann's upload is not his to go on with.
    where = url(begin(browser, "private", "ann/x.txt", 6, path=SIGNED, headers={"x-signature": signature}))
    bobs = sign_upload(api, "private/ann/x.txt", bob)
    assert chunk(browser, where, 0, b"bob", **{"x-signature": bobs}).status_code == 404
    assert browser.delete(where, headers={**VERSION, "x-signature": bobs}).status_code == 404
    # An expired token of the same signer for the same object does nothing.
    earlier = signing.now() - 3 * 3600
    monkeypatch.setattr(signing, "now", lambda: earlier)
    expired = sign_upload(api, "private/ann/x.txt", ann)
    monkeypatch.undo()
    refused = chunk(browser, where, 0, b"abc", **{"x-signature": expired})
    assert refused.status_code == 400 and "expired" in refused.get_data(as_text=True)
    assert (
        begin(browser, "private", "ann/y.txt", 6, path=SIGNED, headers={"x-signature": expired}).status_code
        == 400
    )
    assert browser.head(where, headers={**VERSION, "x-signature": signature}).headers["Upload-Offset"] == "0"


def test_a_signed_resumable_upload_is_not_inherited_with_a_reused_user_id(
    app, api, service, browser, people, backend
):
    """Bob begins a signed resumable upload and is deleted; the next user gets his id, and neither
    his token nor his upload."""
    bob_id, bob = people["bob"]
    signature = sign_upload(api, f"private/{bob_id}/x.txt", bob)
    where = url(
        begin(browser, "private", f"{bob_id}/x.txt", 6, path=SIGNED, headers={"x-signature": signature})
    )
    assert service.delete(f"/auth/v1/admin/users/{bob_id}").status_code == 200
    if backend == "mysql":  # SQLite takes the highest free rowid again by itself
        with app.app_context():
            db.session.execute(text("ALTER TABLE users AUTO_INCREMENT = 1"))
            db.session.commit()
    assert api.sign_up(email="carol@example.com")["user"]["id"] == bob_id
    sent = {"x-signature": signature}
    assert chunk(browser, where, 0, b"abcdef", **sent).status_code == 400
    assert begin(browser, "private", f"{bob_id}/y.txt", 6, path=SIGNED, headers=sent).status_code == 400
    assert service.post("/storage/v1/object/list/private", json={"prefix": str(bob_id)}).json == []


def test_a_signed_resumable_upload_replaces_only_with_upsert(api, browser, people):
    _, ann = people["ann"]
    assert api.post("/storage/v1/object/private/ann/x.txt", token=ann, data=b"old",
                    headers={"Content-Type": "text/plain"}).status_code == 200  # fmt: skip
    plain = sign_upload(api, "private/ann/x.txt", ann, upsert=True)
    assert (
        begin(browser, "private", "ann/x.txt", 3, path=SIGNED, headers={"x-signature": plain}).status_code
        == 201
    )
    api.delete("/storage/v1/object/private/ann/x.txt", token=ann)
    no_upsert = sign_upload(api, "private/ann/x.txt", ann)
    assert api.post("/storage/v1/object/private/ann/x.txt", token=ann, data=b"old",
                    headers={"Content-Type": "text/plain"}).status_code == 200  # fmt: skip
    # Signed without x-upsert: x-upsert on the upload does not make it replace.
    sent = {"x-signature": no_upsert, "x-upsert": "true"}
    assert begin(browser, "private", "ann/x.txt", 3, path=SIGNED, headers=sent).status_code == 409
    assert api.get("/storage/v1/object/private/ann/x.txt", token=ann).data == b"old"


def test_the_unsigned_routes_need_the_api_key(browser):
    response = begin(browser, "private", "a.txt", 3)
    assert response.status_code == 401 and response.json["message"] == "No API key found in request"


def test_expire_uploads_command_removes_what_expired(app, api, people, storage_root, monkeypatch):
    """Each upload begun sweeps some expired ones; `flask expire-uploads` sweeps them all, in batches."""
    _, ann = people["ann"]
    old = [url(begin(api, "private", f"old-{n}.txt", 10, ann)) for n in range(3)]
    for where in old:
        assert chunk(api, where, 0, b"abc", ann).status_code == 204
    later = clock.now() + datetime.timedelta(hours=1, seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    fresh = url(begin(api, "private", "fresh.txt", 10, ann))  # sweeps the three expired
    assert parts_on_disk(storage_root) == []
    for n in range(4):
        assert (
            chunk(api, url(begin(api, "private", f"later-{n}.txt", 10, ann)), 0, b"abc", ann).status_code
            == 204
        )
    assert chunk(api, fresh, 0, b"abc", ann).status_code == 204
    monkeypatch.setattr(clock, "now", lambda: later + datetime.timedelta(hours=2))
    monkeypatch.setattr(resumable, "EXPIRED_PER_SWEEP", 2)
    done = app.test_cli_runner().invoke(args=["expire-uploads"])
    assert done.exit_code == 0 and done.output.strip() == "removed 5 expired uploads", done.output
    assert parts_on_disk(storage_root) == []
