"""What an app written for Supabase meets through the official Python SDK (supabase-auth, over a real
waitress server) and the same requests made by hand: weak passwords, the admin API's paging, ids,
bans and app_metadata, and the services minibase does not provide."""

import httpx
import jwt
import pytest
import requests

from support import assert_auth_error, gotrue_client

SDK = {"X-Supabase-Api-Version": "2024-01-01"}


@pytest.fixture
def admin_sdk(live_server, service_key):
    supabase_auth = pytest.importorskip("supabase_auth")
    with httpx.Client() as http:
        client = supabase_auth.SyncGoTrueClient(
            url=live_server + "/auth/v1",
            headers={"apikey": service_key, "Authorization": f"Bearer {service_key}"},
            auto_refresh_token=False,
            persist_session=False,
            http_client=http,
        )
        yield client.admin


def test_a_weak_password_is_the_sdks_weak_password_error(live_server, anon_key, api):
    pytest.importorskip("supabase_auth")
    from supabase_auth.errors import AuthWeakPasswordError

    with httpx.Client() as http:
        client = gotrue_client(live_server, anon_key, http)
        with pytest.raises(AuthWeakPasswordError) as weak:
            client.sign_up({"email": "weak@example.com", "password": "123"})
    assert weak.value.reasons == ["length"]
    # A plain client keeps the four-field body.
    assert_auth_error(
        api.post("/auth/v1/signup", json={"email": "w@example.com", "password": "1"}), 422, "weak_password"
    )


def test_the_sdk_lists_users_with_its_defaults_and_reads_the_total(admin_sdk, api):
    for n in range(3):
        api.sign_up(f"user{n}@example.com")
    users = admin_sdk.list_users()
    assert [user.email for user in users] == [f"user{n}@example.com" for n in (2, 1, 0)]  # newest first
    assert [user.email for user in admin_sdk.list_users(page=2, per_page=2)] == ["user0@example.com"]


def test_the_link_header_pages_as_gotrue_does(admin, api):
    for n in range(5):
        api.sign_up(f"user{n}@example.com")
    response = admin.get("/auth/v1/admin/users?page=1&per_page=2")
    assert response.headers["X-Total-Count"] == "5"
    assert response.headers["Link"] == (
        '</auth/v1/admin/users?page=2&per_page=2>; rel="next", '
        '</auth/v1/admin/users?page=3&per_page=2>; rel="last"'
    )
    last = admin.get("/auth/v1/admin/users?page=3&per_page=2")
    assert last.headers["Link"] == '</auth/v1/admin/users?page=3&per_page=2>; rel="last"'


def test_the_sdk_gets_updates_and_deletes_a_user_by_the_uuid_form_of_its_id(admin_sdk, api):
    user_id = api.sign_up()["user"]["id"]
    uuid = f"00000000-0000-0000-0000-{user_id:012d}"
    assert admin_sdk.get_user_by_id(uuid).user.email == "ann@example.com"
    updated = admin_sdk.update_user_by_id(uuid, {"user_metadata": {"plan": "pro"}})
    assert updated.user.user_metadata["plan"] == "pro"
    admin_sdk.delete_user(uuid)
    assert_auth_error(api.sign_in(), 400, "invalid_credentials")


@pytest.fixture
def admin(app, service_key):
    from support import Api

    return Api(app, service_key)


def test_a_ban_refuses_sign_in_and_refresh_ends_sessions_and_lifts(admin, api):
    session = api.sign_up()
    user_id = session["user"]["id"]
    path = f"/auth/v1/admin/users/{user_id}"
    banned = admin.put(path, json={"ban_duration": "24h"})
    assert banned.status_code == 200 and banned.json["banned_until"] is not None
    assert_auth_error(api.sign_in(), 400, "user_banned")
    assert_auth_error(api.get("/auth/v1/user", token=session["access_token"]), 401, "session_not_found")
    refresh = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert refresh.status_code == 400
    lifted = admin.put(path, json={"ban_duration": "none"})
    assert lifted.json["banned_until"] is None
    assert api.sign_in().status_code == 200
    short = admin.put(path, json={"ban_duration": "1h30m"})
    assert short.status_code == 200
    assert_auth_error(api.sign_in(), 400, "user_banned")


@pytest.mark.parametrize("duration", ["24x", "", "h", 24, "876600h1s", "-1h"])
def test_a_ban_duration_that_is_not_one_is_refused(admin, api, duration):
    user_id = api.sign_up()["user"]["id"]
    response = admin.put(f"/auth/v1/admin/users/{user_id}", json={"ban_duration": duration})
    assert "ban_duration" in assert_auth_error(response, 400, "validation_failed")["msg"]
    assert api.sign_in().status_code == 200


def test_app_metadata_is_set_by_an_administrator_only_and_reaches_the_token(admin, api):
    session = api.sign_up()
    user_id = session["user"]["id"]
    path = f"/auth/v1/admin/users/{user_id}"
    set_ = admin.put(path, json={"app_metadata": {"plan": "pro", "roles": ["editor"]}})
    assert set_.json["app_metadata"] == {
        "plan": "pro",
        "roles": ["editor"],
        "provider": "email",
        "providers": ["email"],
    }
    merged = admin.put(path, json={"app_metadata": {"roles": None, "provider": "github", "seats": 3}})
    assert merged.json["app_metadata"] == {
        "plan": "pro",
        "seats": 3,
        "provider": "email",
        "providers": ["email"],
    }
    # The user cannot set it: the field is ignored, as GoTrue does.
    own = api.put("/auth/v1/user", token=session["access_token"], json={"app_metadata": {"plan": "free"}})
    assert own.status_code == 200 and own.json["app_metadata"]["plan"] == "pro"
    import jwt

    access = api.sign_in().json["access_token"]
    assert jwt.decode(access, options={"verify_signature": False})["app_metadata"]["plan"] == "pro"


@pytest.mark.parametrize(
    ("path", "shape", "code"),
    [
        ("/storage/v1/object/public/avatars/a.png", "storage", "NoSuchKey"),
        ("/graphql/v1", "rest", "PGRST125"),
        ("/rest/v1/rpc/hello", "rest", "PGRST202"),
        ("/auth/v1/sigup", "auth", "not_found"),
    ],
)
def test_what_minibase_does_not_provide_is_a_json_404_in_that_apis_shape(api, path, shape, code):
    plain = api.get(path)
    assert plain.status_code == 404 and plain.is_json
    if shape == "storage":
        assert plain.json == {
            "statusCode": "404",
            "code": code,
            "error": "not_found",
            "message": "Object not found",
        }
    elif shape == "auth":
        assert assert_auth_error(plain, 404, "not_found")["msg"].endswith(path)
        assert api.get(path, headers=SDK).json["code"] == code
    else:
        assert set(plain.json) == {"message", "code", "hint", "details"} and plain.json["code"] == 404
        assert api.get(path, headers={"X-Client-Info": "supabase-js/2.109.0"}).json["code"] == code


def test_unknown_paths_answer_json_over_http(live_server):
    for path in ("/graphql/v1", "/nothing/here"):
        response = requests.get(live_server + path, timeout=10)
        assert response.status_code == 404
        assert response.headers["Content-Type"] == "application/json"
        assert "minibase" in response.json()["message"]


def test_uuid_user_ids_let_the_sdk_s_admin_calls_take_user_id(make_app, anon_key, service_key):
    """auth-js and supabase-py refuse "42" as an admin id; with UUID_USER_IDS the user's id and the
    token's sub are 00000000-0000-0000-0000-000000000042, which they accept, and the service maps it
    back to the integer user_id."""
    supabase_auth = pytest.importorskip("supabase_auth")
    from support import serve_app

    base, stop = serve_app(make_app(UUID_USER_IDS=True))
    try:
        with httpx.Client() as http:
            client = supabase_auth.SyncGoTrueClient(
                url=base + "/auth/v1", headers={"apikey": anon_key}, persist_session=False, http_client=http
            )
            session = client.sign_up({"email": "uuid@example.com", "password": "secret-pw"}).session
            user_id = session.user.id
            assert user_id == "00000000-0000-0000-0000-000000000001"
            claims = jwt.decode(session.access_token, options={"verify_signature": False})
            assert claims["sub"] == user_id
            assert client.get_user(session.access_token).user.id == user_id
            refreshed = client.refresh_session(session.refresh_token)
            assert refreshed.user.id == user_id
            admin = supabase_auth.SyncGoTrueClient(
                url=base + "/auth/v1",
                headers={"apikey": service_key, "Authorization": f"Bearer {service_key}"},
                persist_session=False,
                http_client=http,
            ).admin
            assert admin.get_user_by_id(user_id).user.email == "uuid@example.com"
        plain = requests.get(
            f"{base}/auth/v1/user", headers={"apikey": anon_key, **bearer(session)}, timeout=10
        )
        assert plain.json()["id"] == user_id  # every client gets the UUID form
    finally:
        stop()


def bearer(session):
    return {"Authorization": f"Bearer {session.access_token}"}
