"""A user id given out again inherits nothing of the user who had it. The application that owns the
users table deletes its users itself (minibase's own rows of them stay), and the id is taken again:
SQLite reuses the highest free rowid, a MariaDB AUTO_INCREMENT does once reset. The next user made
under that id starts clean: no sessions or refresh tokens of the earlier one, no app_metadata (an
admin role), no ban, no factors, no profile, no files. Deleted through the admin API, the same."""

import pytest
from sqlalchemy import text

from extensions import db
from support import Api, assert_auth_error, assert_storage_error

TEXT = {"Content-Type": "text/plain"}


@pytest.fixture
def app(make_app, tmp_path):
    tables = tmp_path / "tables.toml"
    tables.write_text("""
[buckets.private]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"
""")
    return make_app(TABLES_CONFIG=str(tables))


def upload(api, token, name):
    sent = api.post(f"/storage/v1/object/private/{name}", token=token, data=b"ann's", headers=TEXT)
    assert sent.status_code == 200, sent.json


def ids_given_out_again(app, backend):
    if backend == "mysql":  # SQLite takes the highest free rowid again by itself
        with app.app_context():
            db.session.execute(text("ALTER TABLE users AUTO_INCREMENT = 1"))
            db.session.commit()


def deleted_by_another_program(app, backend, user_id):
    with app.app_context():
        db.session.execute(text("DELETE FROM users WHERE user_id = :id"), {"id": user_id})
        db.session.commit()
    ids_given_out_again(app, backend)


def test_a_user_given_a_deleted_users_id_inherits_nothing(app, api, service_key, backend):
    service = Api(app, service_key)
    ann = api.sign_up("ann@example.com", about="ann's own words")
    ann_id, ann_token = ann["user"]["id"], ann["access_token"]
    granted = service.put(f"/auth/v1/admin/users/{ann_id}", json={"app_metadata": {"role": "admin"}})
    assert granted.status_code == 200, granted.json
    enrolled = api.post("/auth/v1/factors", token=ann_token, json={"factor_type": "totp"})
    assert enrolled.status_code == 200, enrolled.json
    upload(api, ann_token, "ann.txt")
    deleted_by_another_program(app, backend, ann_id)

    bob = api.sign_up("bob@example.com")
    assert bob["user"]["id"] == ann_id  # the id is really given out again
    assert "role" not in bob["user"]["app_metadata"]
    assert bob["user"]["user_metadata"].get("about") is None
    assert_auth_error(api.get("/auth/v1/user", token=ann_token), 401, "session_not_found")
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": ann["refresh_token"]}
    )
    assert_auth_error(refreshed, 400, "refresh_token_not_found")
    own = api.get("/auth/v1/user", token=bob["access_token"])
    assert own.status_code == 200 and own.json["email"] == "bob@example.com"
    assert own.json.get("factors") in (None, [])
    assert "role" not in service.get(f"/auth/v1/admin/users/{ann_id}").json["app_metadata"]
    assert_storage_error(api.get("/storage/v1/object/private/ann.txt", token=bob["access_token"]), 404)
    assert api.post("/storage/v1/object/list/private", json={}, token=bob["access_token"]).json == []
    [kept] = service.post("/storage/v1/object/list/private", json={}).json  # the service role's alone
    assert kept["name"] == "ann.txt"
    with app.app_context():
        assert db.session.execute(text("SELECT owner FROM minibase_storage_objects")).scalars().all() == [
            None
        ]


def test_a_user_deleted_through_the_api_leaves_their_files_to_no_one(app, api, service_key, backend):
    service = Api(app, service_key)
    ann = api.sign_up("ann@example.com")
    upload(api, ann["access_token"], "ann.txt")
    assert service.delete(f"/auth/v1/admin/users/{ann['user']['id']}").status_code == 200
    ids_given_out_again(app, backend)
    bob = api.sign_up("bob@example.com")
    assert bob["user"]["id"] == ann["user"]["id"]
    assert_storage_error(api.get("/storage/v1/object/private/ann.txt", token=bob["access_token"]), 404)
    removed = api.delete(
        "/storage/v1/object/private", json={"prefixes": ["ann.txt"]}, token=bob["access_token"]
    )
    assert removed.json == []
    assert service.get("/storage/v1/object/private/ann.txt", buffered=True).data == b"ann's"
