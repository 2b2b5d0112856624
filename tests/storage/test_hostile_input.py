"""Inputs a client controls that once got past Storage or answered a 500, on both databases: media
types spelled to slip by (spaces, case, parameters, lists), digits that are not ASCII, download names
no header can carry, and sizes no column holds."""

import io

import pytest
import sqlalchemy as sa

from support import assert_storage_error

OBJECTS = "/storage/v1/object"
RENDER = "/storage/v1/render/image"
BUCKETS = "/storage/v1/bucket"
# Digits str.isdigit() takes, of which int() takes some: superscripts, circled, Arabic-Indic, fullwidth.
NOT_ASCII_DIGITS = ["²", "①", "¹¹", "١٢", "１２", "1²", "𝟙"]


def upload(client, path, data=b"hello", content_type="text/plain", token=None, **headers):
    return client.post(
        f"{OBJECTS}/{path}", data=data, token=token, headers={"Content-Type": content_type, **headers}
    )


def served_as_attachment(response):
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.headers.get("Content-Disposition", "").startswith("attachment")


def into_avatars(name):
    return {"bucketId": "locked", "sourceKey": name, "destinationBucket": "avatars", "destinationKey": name}


# --- media types


@pytest.mark.parametrize(
    "content_type",
    ["image/svg+xml ;a=b", "image/svg+xml\t;a=b", "IMAGE/SVG+XML", " image/svg+xml ",
     "image/svg+xml;charset=utf-8", "text/html (a comment)", "application/xhtml+xml", "application/rss+xml"],
)  # fmt: skip
def test_a_page_type_however_spelled_is_never_served_inline(service, content_type):
    assert upload(service, "locked/x.svg", b"<svg onload=alert(1)>", content_type).status_code == 200
    got = service.get(f"{OBJECTS}/locked/x.svg")
    assert served_as_attachment(got), got.headers
    assert " ;" not in got.headers["Content-Type"] and got.headers["Content-Type"].islower()


def test_multipart_and_signed_uploads_read_their_types_the_same_way(service, browser):
    form = {"": (io.BytesIO(b"<svg onload=alert(1)>"), "x.svg", "image/svg+xml ;a=b")}
    done = service.post(f"{OBJECTS}/avatars/part.svg", data=form, content_type="multipart/form-data")
    assert done.status_code == 200, done.json
    assert served_as_attachment(browser.get(f"{OBJECTS}/public/avatars/part.svg"))
    signed = service.post(f"{OBJECTS}/upload/sign/avatars/signed.svg").json
    put = browser.put(
        f"/storage/v1{signed['url']}", data=b"<svg/>", headers={"Content-Type": "image/svg+xml ;a=b"}
    )
    assert put.status_code == 200, put.json
    assert served_as_attachment(browser.get(f"{OBJECTS}/public/avatars/signed.svg"))
    refused = service.post(f"{OBJECTS}/upload/sign/avatars/html.txt").json
    listed = browser.put(
        f"/storage/v1{refused['url']}", data=b"x", headers={"Content-Type": "text/plain, text/html"}
    )
    assert_storage_error(listed, 400, "InvalidRequest")


@pytest.mark.parametrize(
    ("content_type", "status"),
    [("IMAGE/PNG", 200), ("image/png; charset=binary", 200), ("Text/Plain ; charset=UTF-8", 200),
     ("image/png\t", 200), ("image/png, text/html", 400), ("text/html, image/png", 400), ("text/html", 415),
     ("image/png\x0b", 400), ("imäge/png", 400), ('"image/png"', 400), ("image/png;;a=b", 400),
     ("image/png; a", 400), ("image/*", 400), ("application/pdf;x=image/png", 400),
     ('application/pdf;x="image/png"', 415)],
)  # fmt: skip
def test_allowed_mime_types_match_the_type_itself(service, content_type, status):
    response = upload(service, "avatars/file", b"x", content_type)
    if status == 200:
        assert response.status_code == 200, response.json
        info = service.get(f"{OBJECTS}/info/avatars/file").json
        assert info["content_type"].partition(";")[0] in ("image/png", "text/plain")
    else:
        assert_storage_error(response, status)


def test_a_type_stored_before_types_were_parsed_is_still_decided_on_its_type(app, service, browser):
    """A row written by an older version (its type spelled as the client sent it) is read as a media
    type too: served as an attachment, and copied under the destination bucket's types."""
    from extensions import db
    from models.storage import StorageObject

    upload(service, "locked/old.svg", b"<svg onload=alert(1)>", "image/svg+xml")
    upload(service, "locked/odd.bin", b"x", "image/png")
    with app.app_context():
        for name, spelled in (("old.svg", "image/svg+xml ;a=b"), ("odd.bin", "image/png, text/html")):
            db.session.execute(
                sa.update(StorageObject).where(StorageObject.name == name).values(mimetype=spelled)
            )
        db.session.commit()
    got = service.get(f"{OBJECTS}/locked/old.svg")
    assert served_as_attachment(got) and got.headers["Content-Type"].startswith("image/svg+xml; a=b")
    odd = service.get(f"{OBJECTS}/locked/odd.bin")
    assert odd.headers["Content-Type"] == "application/octet-stream"
    copied = service.post(f"{OBJECTS}/copy", json=into_avatars("old.svg"))
    assert copied.status_code == 200, copied.json
    assert service.get(f"{OBJECTS}/info/avatars/old.svg").json["content_type"] == "image/svg+xml; a=b"
    assert served_as_attachment(browser.get(f"{OBJECTS}/public/avatars/old.svg"))
    refused = service.post(f"{OBJECTS}/copy", json=into_avatars("odd.bin"))
    assert_storage_error(refused, 415, "InvalidMimeType")


# --- digits that are not ASCII


@pytest.mark.parametrize("digits", NOT_ASCII_DIGITS)
def test_image_sizes_in_other_digits_are_400s(service, browser, digits):
    upload(service, "avatars/p.png", b"\x89PNG", "image/png")
    for parameter in ("width", "height", "quality"):
        for kind in ("public", "authenticated"):
            got = service.get(f"{RENDER}/{kind}/avatars/p.png?{parameter}={digits}")
            assert_storage_error(got, 400, "InvalidRequest")
    signed = service.post(
        f"{OBJECTS}/sign/avatars/p.png", json={"expiresIn": 60, "transform": {"width": digits}}
    )
    assert_storage_error(signed, 400, "InvalidRequest")


@pytest.mark.parametrize("digits", NOT_ASCII_DIGITS)
def test_expiry_in_other_digits_is_a_400(service, digits):
    upload(service, "locked/a.txt")
    assert_storage_error(service.post(f"{OBJECTS}/sign/locked/a.txt", json={"expiresIn": digits}), 400)
    batch = service.post(f"{OBJECTS}/sign/locked", json={"expiresIn": digits, "paths": ["a.txt"]})
    assert_storage_error(batch, 400, "InvalidRequest")
    signed_upload = service.post(f"{OBJECTS}/upload/sign/locked/b.txt", json={"expiresIn": digits})
    assert signed_upload.status_code == 200  # an upload URL lasts two hours, whatever is asked


@pytest.mark.parametrize("digits", ["①", "²", "١٢"])
def test_a_multipart_cache_age_in_other_digits_is_not_a_number(service, digits):
    form = {"cacheControl": digits, "": (io.BytesIO(b"x"), "c.txt", "text/plain")}
    response = service.post(f"{OBJECTS}/locked/c.txt", data=form, content_type="multipart/form-data")
    assert_storage_error(response, 400, "InvalidRequest")


# --- download names


@pytest.mark.parametrize(
    "name", ["a\nb.txt", "a\rb", "a\x00b", "\x1b[31m", "a\x7fb", "a\x85b", "a\u2028b", "x" * 600]
)
def test_a_download_name_no_header_can_carry_is_a_400(service, browser, name):
    upload(service, "avatars/d.txt")
    for path in (f"{OBJECTS}/avatars/d.txt", f"{OBJECTS}/public/avatars/d.txt"):
        assert_storage_error(service.get(path, query_string={"download": name}), 400, "InvalidRequest")


@pytest.mark.parametrize(
    ("name", "header"),
    [("名前.txt", "attachment; filename=.txt; filename*=UTF-8''%E5%90%8D%E5%89%8D.txt"),
     ("naïve ☃.txt", "attachment; filename=\"naive .txt\"; filename*=UTF-8''na%C3%AFve%20%E2%98%83.txt"),
     ('a";b=c.txt', 'attachment; filename="a\\";b=c.txt"'),
     ("", "attachment; filename=d.txt")],
)  # fmt: skip
def test_a_download_name_in_any_script_is_one_valid_header(service, name, header):
    upload(service, "avatars/d.txt")
    got = service.get(f"{OBJECTS}/avatars/d.txt", query_string={"download": name})
    assert got.status_code == 200 and got.data == b"hello"
    assert got.headers["Content-Disposition"] == header


# --- sizes past a column


@pytest.mark.parametrize(
    "limit", [10**30, "1000000000000000000000000000000GB", "999999999999999TB", 2**63, "8388608TB", -1]
)
def test_a_size_limit_past_what_a_column_holds_is_a_400(service, limit):
    assert_storage_error(service.post(BUCKETS, json={"id": "huge", "file_size_limit": limit}), 400)
    assert service.post(BUCKETS, json={"id": "huge"}).status_code == 200
    assert_storage_error(service.put(f"{BUCKETS}/huge", json={"file_size_limit": limit}), 400)
    assert service.put(f"{BUCKETS}/huge", json={"file_size_limit": 2**63 - 1}).status_code == 200
    assert service.get(f"{BUCKETS}/huge").json["file_size_limit"] == 2**63 - 1


def test_a_download_name_opens_nothing_the_caller_may_not_read(api, user_token):
    ann, bob = user_token("ann@example.com"), user_token("bob@example.com")
    upload(api, "private/ann/secret.txt", b"s", token=ann)
    for download in ("1", "secret.txt", ""):
        got = api.get(f"{OBJECTS}/private/ann/secret.txt", token=bob, query_string={"download": download})
        assert_storage_error(got, 404, "NoSuchKey")


# --- the body before the object


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("post", f"{OBJECTS}/sign/avatars/missing.png", {"expiresIn": 0}),
     ("post", f"{OBJECTS}/sign/avatars/missing.png", {"expiresIn": -5}),
     ("post", f"{OBJECTS}/sign/avatars/missing.png", {"expiresIn": "soon"}),
     ("post", f"{OBJECTS}/sign/avatars/missing.png", {}),
     ("post", f"{OBJECTS}/sign/nowhere/missing.png", {"expiresIn": 1.5}),
     ("post", f"{OBJECTS}/sign/avatars/missing.png", {"expiresIn": 60, "transform": {"width": 0}}),
     ("post", f"{OBJECTS}/sign/nowhere", {"expiresIn": 0, "paths": ["a.png"]}),
     ("post", f"{OBJECTS}/sign/nowhere", {"expiresIn": 60, "paths": []}),
     ("post", f"{OBJECTS}/sign/nowhere", {"expiresIn": 60}),
     ("delete", f"{OBJECTS}/nowhere", {"prefixes": []}),
     ("delete", f"{OBJECTS}/nowhere", {"prefixes": "a.png"}),
     ("delete", f"{OBJECTS}/nowhere", {}),
     ("put", f"{BUCKETS}/nowhere", {"public": "yes"}),
     ("put", f"{BUCKETS}/nowhere", {"file_size_limit": "lots"}),
     ("put", f"{BUCKETS}/nowhere", {}),
     ("post", f"{OBJECTS}/move", {"bucketId": "nowhere", "sourceKey": "a.png"}),
     ("post", f"{OBJECTS}/copy", {"bucketId": "nowhere", "sourceKey": "a.png", "destinationKey": 5}),
     ("post", f"{OBJECTS}/list/nowhere", {"limit": 0}),
     ("post", f"{OBJECTS}/list-v2/nowhere", {"limit": 0})],
)  # fmt: skip
def test_a_bad_body_is_a_400_before_the_object_is_looked_up(service, api, user_token, method, path, body):
    """As Supabase's schema validation answers: a bad expiresIn is a 400 even for an object (or a
    bucket) that does not exist, for the service key and for a user alike."""
    for client, token in ((service, None), (api, user_token("ann@example.com"))):
        answer = getattr(client, method)(path, json=body, token=token)
        if path.startswith(BUCKETS) and token is not None:
            assert_storage_error(answer, 403)  # the bucket API is the service key's before anything
            continue
        assert_storage_error(answer, 400, "InvalidRequest")
