"""User administration (/auth/v1/admin) with the service_role key."""

import pytest

from support import Api, assert_auth_error


@pytest.fixture
def admin(app, service_key):
    return Api(app, service_key)


def test_only_the_service_role_may_administer(api, admin):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.get("/auth/v1/admin/users"), 403, "not_admin")
    assert_auth_error(api.get("/auth/v1/admin/users", token=token), 403, "not_admin")
    assert admin.get("/auth/v1/admin/users").status_code == 200
    # the service key as a bearer under the anon apikey, as the official admin client sends it
    assert api.get("/auth/v1/admin/users", token=admin.key).status_code == 200


def test_create_get_list_update_delete(admin, api):
    created = admin.post(
        "/auth/v1/admin/users",
        json={"email": "Zed@Example.com", "password": "zed-secret", "user_metadata": {"first_name": "Zed"},
              "email_confirm": True},
    )  # fmt: skip
    assert created.status_code == 200, created.json
    user_id = created.json["id"]
    assert created.json["email"] == "zed@example.com"
    assert created.json["user_metadata"]["first_name"] == "Zed"
    assert api.sign_in("zed@example.com", "zed-secret").status_code == 200
    assert admin.get(f"/auth/v1/admin/users/{user_id}").json["email"] == "zed@example.com"

    api.sign_up("amy@example.com")
    listing = admin.get("/auth/v1/admin/users?page=1&per_page=1")
    assert listing.status_code == 200 and listing.headers["X-Total-Count"] == "2"
    # Newest first, as GoTrue lists them.
    assert [u["email"] for u in listing.json["users"]] == ["amy@example.com"]
    assert [u["email"] for u in admin.get("/auth/v1/admin/users?page=2&per_page=1").json["users"]] == [
        "zed@example.com"
    ]

    session = api.sign_in("zed@example.com", "zed-secret").json
    updated = admin.put(
        f"/auth/v1/admin/users/{user_id}", json={"password": "new-zed-secret", "about": "admin says hi"}
    )
    assert updated.status_code == 200 and updated.json["user_metadata"]["about"] == "admin says hi"
    assert_auth_error(api.get("/auth/v1/user", token=session["access_token"]), 401, "session_not_found")
    assert api.sign_in("zed@example.com", "new-zed-secret").status_code == 200

    session = api.sign_in("zed@example.com", "new-zed-secret").json
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"active": False}).status_code == 200
    assert_auth_error(api.get("/auth/v1/user", token=session["access_token"]), 401, "session_not_found")
    assert_auth_error(api.sign_in("zed@example.com", "new-zed-secret"), 400, "user_inactive")
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"active": True}).status_code == 200
    assert api.sign_in("zed@example.com", "new-zed-secret").status_code == 200

    deleted = admin.delete(f"/auth/v1/admin/users/{user_id}")
    assert deleted.status_code == 200 and deleted.json == {}
    assert_auth_error(admin.get(f"/auth/v1/admin/users/{user_id}"), 404, "user_not_found")
    assert_auth_error(api.sign_in("zed@example.com", "new-zed-secret"), 400, "invalid_credentials")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/auth/v1/admin/users", {"email": "x@example.com"}, 400, "validation_failed"),
        ("POST", "/auth/v1/admin/users", {"email": "bad", "password": "secret-pw"}, 400, "validation_failed"),
        ("POST", "/auth/v1/admin/users", {"email": "x@example.com", "password": "123"}, 422, "weak_password"),
        ("POST", "/auth/v1/admin/users", {"email": "ann@example.com", "password": "secret-pw"}, 422,
         "user_already_exists"),
        ("PUT", "/auth/v1/admin/users/999", {"about": "x"}, 404, "user_not_found"),
        ("PUT", "/auth/v1/admin/users/1", {"active": "perhaps"}, 400, "validation_failed"),
        ("PUT", "/auth/v1/admin/users/1", {"shoe_size": 9}, 400, "validation_failed"),
        ("DELETE", "/auth/v1/admin/users/999", None, 404, "user_not_found"),
        ("GET", "/auth/v1/admin/users?page=0", None, 400, "validation_failed"),
        ("GET", "/auth/v1/admin/users?per_page=abc", None, 400, "validation_failed"),
        ("GET", "/auth/v1/admin/users/abc", None, 404, "not_found"),
    ],
)  # fmt: skip
def test_admin_errors(admin, api, method, path, body, status, code):
    api.sign_up()
    assert_auth_error(admin.request(method, path, json=body), status, code)


def test_official_clients_get_string_ids(admin):
    admin.post("/auth/v1/admin/users", json={"email": "s@example.com", "password": "secret-pw"})
    response = admin.get("/auth/v1/admin/users", headers={"X-Supabase-Api-Version": "2024-01-01"})
    assert response.json["users"][0]["id"] == "1"
    assert response.headers["X-Supabase-Api-Version"] == "2024-01-01"


def test_deleting_a_user_other_rows_refer_to_is_a_409_and_changes_nothing(admin, api, app):
    from sqlalchemy import text

    from extensions import db

    session = api.sign_up()
    with app.app_context():
        db.session.execute(
            text("CREATE TABLE posts (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users (user_id))")
        )
        db.session.execute(text("INSERT INTO posts (id, user_id) VALUES (1, 1)"))
        db.session.commit()
    assert_auth_error(admin.delete("/auth/v1/admin/users/1"), 409, "user_referenced")
    assert api.get("/auth/v1/user", token=session["access_token"]).status_code == 200


def test_ids_and_pages_out_of_range_are_4xx_and_the_uuid_form_names_the_user(admin, api):
    user_id = api.sign_up()["user"]["id"]
    for path in ("/auth/v1/admin/users/99999999999999999999999", "/auth/v1/admin/users/-1"):
        assert_auth_error(admin.get(path), 404, "not_found")
    for query in ("page=100000000000000000000", "page=0", "per_page=1001", "page=x"):
        assert_auth_error(admin.get(f"/auth/v1/admin/users?{query}"), 400, "validation_failed")
    # What the SDKs send when the caller gives no page: the defaults.
    listed = admin.get("/auth/v1/admin/users?page=&per_page=")
    assert listed.status_code == 200 and [u["id"] for u in listed.json["users"]] == [user_id]
    uuid = f"00000000-0000-0000-0000-{user_id:012d}"
    assert admin.get(f"/auth/v1/admin/users/{uuid}").json["id"] == user_id


def test_email_confirm_false_leaves_the_address_unconfirmed_until_the_admin_confirms_it(admin, api):
    created = admin.post(
        "/auth/v1/admin/users",
        json={"email": "una@example.com", "password": "una-secret", "email_confirm": False},
    )
    assert created.status_code == 200 and created.json["email_confirmed_at"] is None
    assert_auth_error(api.sign_in("una@example.com", "una-secret"), 400, "email_not_confirmed")
    confirmed = admin.put(f"/auth/v1/admin/users/{created.json['id']}", json={"email_confirm": True})
    assert confirmed.status_code == 200 and confirmed.json["email_confirmed_at"]
    assert api.sign_in("una@example.com", "una-secret").status_code == 200
    # Without email_confirm the address counts as confirmed, as before.
    plain = admin.post("/auth/v1/admin/users", json={"email": "pat@example.com", "password": "pat-secret"})
    assert (
        plain.json["email_confirmed_at"] and api.sign_in("pat@example.com", "pat-secret").status_code == 200
    )
