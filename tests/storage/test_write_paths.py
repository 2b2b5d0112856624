"""Every way to write an object is held to what a direct upload is held to, on both databases: a
signed upload URL (when it is made and when it is used, as the user who made it), a move and a copy
(the destination's rule words, policies, mime types and size limit)."""

import base64
import json

import jwt
import pytest
from sqlalchemy import text

from extensions import db
from support import SECRET, assert_storage_error

OBJECTS = "/storage/v1/object"
TEXT = {"Content-Type": "text/plain"}


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

[buckets.faces]
public = true
select = "anon"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.faces.policies]
insert = "{mine}"

[buckets.inbox]
select = "authenticated"
insert = "authenticated"
update = "authenticated"

[buckets.inbox.policies]
insert = ":app_metadata.role = 'editor'"
update = ":app_metadata.role = 'editor'"

[buckets.private]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"
""")
    return path


@pytest.fixture
def people(api):
    """Two signed-up users: name -> (user id, access token)."""
    found = {}
    for name in ("ann", "bob"):
        session = api.sign_up(email=f"{name}@example.com")
        found[name] = (session["user"]["id"], session["access_token"])
    return found


def put(client, path, token=None, data=b"hello", headers=TEXT, **more):
    return client.post(f"{OBJECTS}/{path}", data=data, token=token, headers={**headers, **more})


def sign_upload(client, path, token=None, upsert=False):
    return client.post(
        f"{OBJECTS}/upload/sign/{path}", token=token, headers={"x-upsert": str(upsert).lower()}
    )


def use(browser, signed, data=b"signed", headers=TEXT):
    """PUT to a signed upload URL, with no credentials."""
    return browser.put(f"/storage/v1{signed['url']}", data=data, headers=headers)


def read(client, path):
    return client.get(f"{OBJECTS}/{path}", token=None).data


# --- signed upload URLs


def test_a_signed_upsert_cannot_overwrite_another_users_object(api, browser, people):
    (_, ann), (_, bob) = people["ann"], people["bob"]
    assert put(api, "avatars/a.txt", ann, b"ann's").status_code == 200
    assert_storage_error(put(api, "avatars/a.txt", bob, b"bob's", **{"x-upsert": "true"}), 403)
    assert_storage_error(sign_upload(api, "avatars/a.txt", bob, upsert=True), 403, "AccessDenied")
    assert_storage_error(sign_upload(api, "avatars/a.txt", bob), 409, "KeyAlreadyExists")
    assert read(api, "avatars/a.txt") == b"ann's"
    own = sign_upload(api, "avatars/a.txt", ann, upsert=True)
    assert own.status_code == 200, own.json
    assert use(browser, own.json, b"ann's again").status_code == 200
    assert read(api, "avatars/a.txt") == b"ann's again"


def test_a_signed_url_is_checked_again_when_used(api, browser, people):
    """Signed while the name was free; by the time it is used, another user's object is there."""
    (_, ann), (_, bob) = people["ann"], people["bob"]
    signed = sign_upload(api, "avatars/b.txt", ann, upsert=True)
    assert signed.status_code == 200, signed.json
    assert put(api, "avatars/b.txt", bob, b"bob's").status_code == 200
    assert_storage_error(use(browser, signed.json, b"ann's"), 403, "AccessDenied")
    plain = sign_upload(api, "avatars/c.txt", ann)
    assert put(api, "avatars/c.txt", bob, b"bob's").status_code == 200
    assert_storage_error(use(browser, plain.json, b"ann's"), 409, "KeyAlreadyExists")
    assert read(api, "avatars/b.txt") == read(api, "avatars/c.txt") == b"bob's"


def test_a_replayed_signed_url_overwrites_only_with_upsert(api, browser, people):
    _, ann = people["ann"]
    once = sign_upload(api, "avatars/d.txt", ann).json
    assert use(browser, once, b"first").status_code == 200
    assert_storage_error(use(browser, once, b"second"), 409, "KeyAlreadyExists")
    assert read(api, "avatars/d.txt") == b"first"
    again = sign_upload(api, "avatars/e.txt", ann, upsert=True).json
    assert use(browser, again, b"first").status_code == 200
    assert use(browser, again, b"second").status_code == 200  # upsert granted, and ann still owns it
    assert read(api, "avatars/e.txt") == b"second"


def test_a_signed_url_uploads_as_the_user_who_signed_it(api, service, browser, people):
    """Their row policies and app_metadata as they are when it is used; their account, still alive."""
    (ann_id, ann), (bob_id, bob) = people["ann"], people["bob"]
    assert_storage_error(sign_upload(api, "inbox/a.txt", ann), 403, "AccessDenied")  # not an editor
    for user in (ann_id, bob_id):
        service.put(f"/auth/v1/admin/users/{user}", json={"app_metadata": {"role": "editor"}})
    signed = sign_upload(api, "inbox/a.txt", ann).json
    service.put(f"/auth/v1/admin/users/{ann_id}", json={"app_metadata": {"role": "reader"}})
    assert_storage_error(use(browser, signed), 403, "AccessDenied")
    bobs = sign_upload(api, "inbox/b.txt", bob).json
    assert service.put(f"/auth/v1/admin/users/{bob_id}", json={"active": False}).status_code == 200
    assert_storage_error(use(browser, bobs), 400, "InvalidJWT")
    listed = service.post(f"{OBJECTS}/list/inbox", json={})
    assert listed.json == []


def listed(service, bucket="avatars"):
    return [entry["name"] for entry in service.post(f"{OBJECTS}/list/{bucket}", json={}).json]


def reuse_ids(app, backend):
    """Let the next user take the highest free id again: SQLite does by itself (a rowid table), an
    AUTO_INCREMENT does once it is reset, as an administrator or a restore may."""
    if backend == "mysql":
        with app.app_context():
            db.session.execute(text("ALTER TABLE users AUTO_INCREMENT = 1"))
            db.session.commit()


def test_a_deleted_users_signed_url_uploads_nothing(api, service, browser, people):
    bob_id, bob = people["bob"]
    signed = sign_upload(api, "avatars/bob.txt", bob).json
    assert service.delete(f"/auth/v1/admin/users/{bob_id}").status_code == 200
    assert_storage_error(use(browser, signed), 400, "InvalidJWT")
    assert listed(service) == []


def test_a_reused_user_id_inherits_no_signed_url(app, api, service, browser, people, backend):
    """bob signs a URL and is deleted; the next user gets bob's id, and not his URL."""
    bob_id, bob = people["bob"]
    signed = sign_upload(api, "avatars/bob.txt", bob).json
    assert service.delete(f"/auth/v1/admin/users/{bob_id}").status_code == 200
    reuse_ids(app, backend)
    carol = api.sign_up(email="carol@example.com")
    assert carol["user"]["id"] == bob_id  # the id is really taken again
    assert_storage_error(use(browser, signed), 400, "InvalidJWT")
    assert listed(service) == []
    own = sign_upload(api, "avatars/carol.txt", carol["access_token"]).json
    assert use(browser, own).status_code == 200  # carol's own URL works


def test_a_user_deleted_by_another_program_leaves_no_signed_url(app, api, service, browser, people, backend):
    """The application that owns the users table deletes bob (a member since last year) itself, so
    his sessions stay, and makes another user, who gets his id: bob's URL is not theirs."""
    bob_id, bob = people["bob"]
    with app.app_context():
        db.session.execute(
            text("UPDATE users SET joined = '2025-06-01 12:00:00' WHERE user_id = :id"), {"id": bob_id}
        )
        db.session.commit()
    signed = sign_upload(api, "avatars/bob.txt", bob).json
    with app.app_context():
        db.session.execute(text("DELETE FROM users WHERE user_id = :id"), {"id": bob_id})
        db.session.commit()
    reuse_ids(app, backend)
    with app.app_context():
        db.session.execute(text("INSERT INTO users (email, password) VALUES ('dan@example.com', 'x')"))
        db.session.commit()
        dan = db.session.execute(text("SELECT user_id FROM users WHERE email = 'dan@example.com'")).scalar()
    assert dan == bob_id
    assert_storage_error(use(browser, signed), 400, "InvalidJWT")
    assert listed(service) == []


def test_a_signed_url_ends_with_the_session_that_signed_it(api, service, browser, people):
    _, ann = people["ann"]
    signed = sign_upload(api, "avatars/ann.txt", ann).json
    later = api.sign_in("ann@example.com").json["access_token"]
    assert api.post("/auth/v1/logout?scope=local", token=ann).status_code == 204
    assert_storage_error(use(browser, signed), 400, "InvalidJWT")
    assert listed(service) == []
    assert use(browser, sign_upload(api, "avatars/ann.txt", later).json).status_code == 200


def test_an_altered_signed_upload_token_is_refused(api, service, browser, people):
    """Another user's id written into ann's token, signed again without the secret or not at all."""
    (_, ann), (bob_id, _) = people["ann"], people["bob"]
    signed = sign_upload(api, "avatars/ann.txt", ann).json
    header, payload, signature = signed["token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["signer"]["user"] = str(bob_id)
    swapped = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    for token in (
        f"{header}.{swapped}.{signature}",
        jwt.encode(claims, "another-secret-of-at-least-32-characters", algorithm="HS256"),
        jwt.encode(claims, None, algorithm="none"),
    ):
        url = f"/storage/v1/object/upload/sign/avatars/ann.txt?token={token}"
        assert_storage_error(browser.put(url, data=b"x", headers=TEXT), 400, "InvalidJWT")
    # Signed with the secret, bob's id with ann's session and account is no one's.
    forged = jwt.encode(claims, SECRET, algorithm="HS256")
    url = f"/storage/v1/object/upload/sign/avatars/ann.txt?token={forged}"
    assert_storage_error(browser.put(url, data=b"x", headers=TEXT), 400, "InvalidJWT")
    assert listed(service) == []


def test_a_signed_upload_keeps_the_buckets_types_and_size(api, browser, people):
    _, ann = people["ann"]
    signed = sign_upload(api, "avatars/f.pdf", ann).json
    assert_storage_error(use(browser, signed, b"%PDF", {"Content-Type": "application/pdf"}), 415)
    assert_storage_error(use(browser, signed, b"x" * 1001), 413, "EntityTooLarge")
    assert use(browser, signed, b"x" * 1000).status_code == 200


def test_a_signed_upload_token_is_no_api_key(service, browser):
    token = sign_upload(service, "avatars/g.txt").json["token"]
    assert browser.get("/rest/v1/", headers={"apikey": token}).status_code == 401
    listed = browser.post(f"{OBJECTS}/list/private", json={}, headers={"apikey": token})
    assert listed.status_code == 401


# --- move


def test_a_move_cannot_squat_another_users_folder(api, people):
    (ann_id, _), (bob_id, bob) = people["ann"], people["bob"]
    assert put(api, f"faces/{bob_id}/me.png", bob, headers={"Content-Type": "image/png"}).status_code == 200
    assert_storage_error(put(api, f"faces/{ann_id}/me.png", bob), 403, "AccessDenied")
    moved = api.post(
        f"{OBJECTS}/move",
        json={"bucketId": "faces", "sourceKey": f"{bob_id}/me.png", "destinationKey": f"{ann_id}/me.png"},
        token=bob,
    )
    assert_storage_error(moved, 403, "AccessDenied")
    assert api.get(f"{OBJECTS}/public/faces/{ann_id}/me.png").status_code == 404
    assert read(api, f"faces/{bob_id}/me.png") == b"hello"
    within = {"bucketId": "faces", "sourceKey": f"{bob_id}/me.png", "destinationKey": f"{bob_id}/you.png"}
    assert api.post(f"{OBJECTS}/move", json=within, token=bob).status_code == 200


def test_a_move_into_another_bucket_keeps_its_types_and_size(api, people):
    _, ann = people["ann"]
    put(api, "private/ann/big.txt", ann, b"x" * 2000)
    put(api, "private/ann/doc.pdf", ann, b"%PDF", headers={"Content-Type": "application/pdf"})
    for source, status in (("big.txt", 413), ("doc.pdf", 415)):
        body = {"bucketId": "private", "sourceKey": f"ann/{source}", "destinationBucket": "avatars",
                "destinationKey": source}  # fmt: skip
        assert_storage_error(api.post(f"{OBJECTS}/move", json=body, token=ann), status)
        assert api.get(f"{OBJECTS}/private/ann/{source}", token=ann).status_code == 200


# --- copy


def test_a_copy_keeps_the_destinations_types_size_and_owners(api, people, storage_root):
    (_, ann), (_, bob) = people["ann"], people["bob"]
    put(api, "private/ann/big.txt", ann, b"x" * 2000)
    put(api, "private/ann/doc.svg", ann, b"<svg/>", headers={"Content-Type": "application/pdf"})
    before = sorted(storage_root.rglob("*"))
    for source, status in (("big.txt", 413), ("doc.svg", 415)):
        body = {"bucketId": "private", "sourceKey": f"ann/{source}", "destinationBucket": "avatars",
                "destinationKey": source}  # fmt: skip
        assert_storage_error(api.post(f"{OBJECTS}/copy", json=body, token=ann), status)
        assert api.get(f"{OBJECTS}/public/avatars/{source}").status_code == 404
    assert sorted(storage_root.rglob("*")) == before  # no bytes copied for nothing
    put(api, "avatars/ann.txt", ann, b"ann's")
    put(api, "private/bob/mine.txt", bob, b"bob's")
    over = {"bucketId": "private", "sourceKey": "bob/mine.txt", "destinationBucket": "avatars",
            "destinationKey": "ann.txt"}  # fmt: skip
    assert_storage_error(api.post(f"{OBJECTS}/copy", json=over, token=bob, headers={"x-upsert": "true"}), 403)
    assert_storage_error(api.post(f"{OBJECTS}/copy", json=over, token=bob), 409)
    assert read(api, "avatars/ann.txt") == b"ann's"
