"""The auth API's endpoints, and every error it answers with: status and error_code, case by case."""

import datetime

import pytest
from sqlalchemy import select, update

from auth import tokens
from extensions import db
from models import users_table
from models.auth import Profile
from support import assert_auth_error, assert_rest_error, assert_storage_error

VERSIONED = {"X-Supabase-Api-Version": "2024-01-01"}


def test_sign_up_returns_a_session_and_stores_a_bcrypt_hash(api, app):
    session = api.sign_up("  Ann@Example.COM ", "secret-pw", first_name="Ann", username="ann", pet="cat")
    assert session["token_type"] == "bearer"
    assert session["expires_in"] == 3600
    assert session["expires_at"] > 0 and session["access_token"] and session["refresh_token"]
    user = session["user"]
    assert isinstance(user["id"], int)
    assert user["email"] == "ann@example.com"
    assert user["role"] == user["aud"] == "authenticated"
    # Only what was given: no null last_name or about invented, as GoTrue's user_metadata.
    assert user["user_metadata"] == {"username": "ann", "first_name": "Ann", "pet": "cat"}
    assert user["app_metadata"] == {"provider": "email", "providers": ["email"]}
    assert user["created_at"].endswith("Z")
    with app.app_context():
        users = users_table()
        row = db.session.execute(select(users).where(users.c.user_id == user["id"])).one()
    assert row.password.startswith("$2b$04$") and row.active == 1 and row.joined is not None
    assert "secret-pw" not in str(session) and row.password not in str(session)


def test_password_sign_in_and_current_user(api):
    api.sign_up(first_name="Ann")
    response = api.sign_in("ANN@example.com ", "secret-pw")
    assert response.status_code == 200
    token = response.json["access_token"]
    me = api.get("/auth/v1/user", token=token)
    assert me.status_code == 200
    assert me.json["email"] == "ann@example.com"
    assert me.json["user_metadata"]["first_name"] == "Ann"
    assert me.json["last_sign_in_at"] is not None
    assert "password" not in me.get_data(as_text=True)


def test_the_user_object_shows_each_instant_as_it_is_now(api, monkeypatch):
    """Formatted instants and the e-mail identity's id are remembered: a later sign-in still shows
    its own time, and each user their own identity id."""
    from auth import tokens

    api.sign_up()
    first = api.sign_in().json["access_token"]
    before = api.get("/auth/v1/user", token=first).json
    real_now = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: real_now + 125)
    second = api.sign_in().json["access_token"]
    after = api.get("/auth/v1/user", token=second).json
    moved = datetime.datetime.fromtimestamp(real_now + 125, datetime.UTC)
    assert after["last_sign_in_at"] == moved.strftime("%Y-%m-%dT%H:%M:%SZ") != before["last_sign_in_at"]
    assert after["created_at"] == before["created_at"]
    other = api.sign_up("bob@example.com")["user"]
    assert after["identities"][0]["identity_id"] == before["identities"][0]["identity_id"]
    assert other["identities"][0]["identity_id"] != after["identities"][0]["identity_id"]


def statements_run(app, monkeypatch):
    """A list that grows by one for each SQL statement the app runs, prepared (run on the DBAPI) or
    through SQLAlchemy."""
    from sqlalchemy import event

    from database import statements

    ran, run_prepared = [], statements.run_prepared

    def counted(engine, values, *prepared, **kwargs):
        ran.extend(statement.sql for statement in prepared)
        return run_prepared(engine, values, *prepared, **kwargs)

    monkeypatch.setattr(statements, "run_prepared", counted)
    with app.app_context():
        engine = db.engine
    event.listen(engine, "before_cursor_execute", lambda *args: ran.append(args[2]))
    return ran


def test_current_user_is_one_statement_unless_the_user_has_factors(api, app, monkeypatch):
    token = api.sign_up()["access_token"]
    ran = statements_run(app, monkeypatch)
    me = api.get("/auth/v1/user", token=token)
    assert me.status_code == 200 and "factors" not in me.json
    assert len(ran) == 1, ran
    enrolled = api.post(
        "/auth/v1/factors", token=token, json={"factor_type": "totp", "friendly_name": "phone"}
    )
    assert enrolled.status_code == 200, enrolled.json
    ran.clear()
    me = api.get("/auth/v1/user", token=token)
    assert [(f["id"], f["friendly_name"]) for f in me.json["factors"]] == [(enrolled.json["id"], "phone")]
    assert len(ran) == 3, ran  # the bearer check's row says there are links: factors and identities
    assert "minibase_mfa_factors" in ran[1] and "secret" not in ran[1].partition("FROM")[0]  # never read


def test_sign_in_ignores_fields_it_does_not_use(api):
    api.sign_up()
    response = api.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "secret-pw", "gotrue_meta_security": {}},
    )
    assert response.status_code == 200


def test_official_clients_get_string_ids_and_gotrue_error_shape(api):
    api.sign_up()
    response = api.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "secret-pw"},
        headers=VERSIONED,
    )
    assert response.status_code == 200
    assert response.headers["X-Supabase-Api-Version"] == "2024-01-01"
    assert response.json["user"]["id"] == str(int(response.json["user"]["id"]))
    me = api.get("/auth/v1/user", token=response.json["access_token"], headers=VERSIONED)
    assert isinstance(me.json["id"], str)
    wrong = api.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "wrong-pw"},
        headers=VERSIONED,
    )
    assert wrong.status_code == 400
    assert wrong.json == {"code": "invalid_credentials", "message": "Invalid login credentials"}


def test_update_user_flat_fields_data_and_about(api):
    token = api.sign_up(first_name="Ann", last_name="Lee")["access_token"]
    response = api.patch(
        "/auth/v1/user",
        token=token,
        json={"first_name": "Anna", "about": "I fly", "data": {"first_name": "ignored", "pet": "dog"}},
    )
    assert response.status_code == 200, response.json
    meta = response.json["user_metadata"]
    assert meta["first_name"] == "Anna" and meta["last_name"] == "Lee"
    assert meta["about"] == "I fly" and meta["pet"] == "dog"
    # PUT (supabase-auth) works too; a null in data removes a metadata key
    response = api.put("/auth/v1/user", token=token, json={"data": {"pet": None, "city": "Oslo"}})
    assert response.status_code == 200
    assert "pet" not in response.json["user_metadata"]
    assert response.json["user_metadata"]["city"] == "Oslo"
    assert response.json["user_metadata"]["about"] == "I fly"
    assert api.get("/auth/v1/user", token=token).json["user_metadata"] == response.json["user_metadata"]


def test_update_ignores_gotrue_fields_that_do_not_apply(api):
    token = api.sign_up()["access_token"]
    response = api.put("/auth/v1/user", token=token, json={"nonce": "x", "phone": "1", "about": "a"})
    assert response.status_code == 200


def test_email_change_and_sign_in_with_the_new_email(api):
    token = api.sign_up()["access_token"]
    response = api.patch("/auth/v1/user", token=token, json={"email": "New@Example.com"})
    assert response.json["email"] == "new@example.com"
    assert api.sign_in("new@example.com").status_code == 200
    assert_auth_error(api.sign_in("ann@example.com"), 400, "invalid_credentials")


def test_password_change_ends_the_other_sessions(api):
    first = api.sign_up()
    second = api.sign_in().json
    response = api.patch("/auth/v1/user", token=first["access_token"], json={"password": "new-secret"})
    assert response.status_code == 200
    assert api.get("/auth/v1/user", token=first["access_token"]).status_code == 200
    assert_auth_error(api.get("/auth/v1/user", token=second["access_token"]), 401, "session_not_found")
    assert_auth_error(
        api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": second["refresh_token"]}),
        400,
        "refresh_token_not_found",
    )
    assert api.sign_in(password="new-secret").status_code == 200
    assert_auth_error(api.sign_in(password="secret-pw"), 400, "invalid_credentials")


@pytest.mark.parametrize(
    ("scope", "first_alive", "second_alive"),
    [(None, False, False), ("global", False, False), ("local", False, True), ("others", True, False)],
)
def test_logout_scopes(api, scope, first_alive, second_alive):
    first = api.sign_up()["access_token"]
    second = api.sign_in().json["access_token"]
    path = "/auth/v1/logout" + (f"?scope={scope}" if scope else "")
    response = api.post(path, token=first)
    assert response.status_code == 204 and response.data == b""
    assert (api.get("/auth/v1/user", token=first).status_code == 200) is first_alive
    assert (api.get("/auth/v1/user", token=second).status_code == 200) is second_alive


def test_logout_with_an_unknown_scope_is_refused(api):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.post("/auth/v1/logout?scope=everyone", token=token), 400, "validation_failed")
    assert api.get("/auth/v1/user", token=token).status_code == 200


def test_settings(api):
    response = api.get("/auth/v1/settings")
    assert response.status_code == 200
    assert response.json["disable_signup"] is False
    assert response.json["external"] == {"email": True}


# --- the errors, one case each


def test_wrong_password_and_unknown_email_answer_alike(api):
    api.sign_up()
    wrong = assert_auth_error(api.sign_in(password="not-it"), 400, "invalid_credentials")
    unknown = assert_auth_error(api.sign_in("nobody@example.com"), 400, "invalid_credentials")
    assert wrong == unknown
    assert wrong["msg"] == "Invalid login credentials"


def test_inactive_user_cannot_sign_in_refresh_or_use_tokens(api, app):
    session = api.sign_up()
    with app.app_context():
        users = users_table()
        db.session.execute(users.update().values(active=0))
        db.session.commit()
    assert_auth_error(api.sign_in(), 400, "user_inactive")
    assert_auth_error(api.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(
        api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}),
        400,
        "user_inactive",
    )
    assert_auth_error(api.get("/auth/v1/user", token=session["access_token"]), 401, "user_inactive")


def test_a_user_banned_in_the_database_cannot_use_their_tokens(api, app):
    """A ban written straight into the profile table (an administrator in SQL, another application)
    ends no session, unlike the admin API's: the user's access token is refused on the next request,
    on every API, until the ban ends."""
    session = api.sign_up()
    token = session["access_token"]
    assert api.get("/auth/v1/user", token=token).status_code == 200
    with app.app_context():
        until = tokens.utcnow() + datetime.timedelta(hours=1)
        db.session.execute(update(Profile).values(banned_until=until))
        db.session.commit()
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "user_banned")
    refused = api.get("/rest/v1/", token=token)
    assert refused.status_code == 401
    assert_auth_error(
        api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}),
        400,
        "user_banned",
    )
    with app.app_context():
        ended = tokens.utcnow() - datetime.timedelta(seconds=1)
        db.session.execute(update(Profile).values(banned_until=ended))
        db.session.commit()
    assert api.get("/auth/v1/user", token=token).status_code == 200


@pytest.mark.parametrize(
    "query", ["", "?grant_type=", "?grant_type=client_credentials", "?grant_type=PASSWORD"]
)
def test_unsupported_grant_type(api, query):
    assert_auth_error(api.post("/auth/v1/token" + query, json={}), 400, "unsupported_grant_type")


@pytest.mark.parametrize(
    "path",
    ["/auth/v1/signup", "/auth/v1/token?grant_type=password", "/auth/v1/token?grant_type=refresh_token"],
)
@pytest.mark.parametrize("body", [b"", b"{", b"not json", b"[1, 2]", b'"text"', b"null", b"\xff\xfe"])
def test_body_not_a_json_object(api, path, body):
    response = api.post(path, data=body, headers={"Content-Type": "application/json"})
    body = assert_auth_error(response, 400, "bad_json")
    assert body["msg"] == "Could not parse request body as JSON"


def test_update_with_a_body_that_is_not_json(api):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.patch("/auth/v1/user", token=token, data=b"{oops"), 400, "bad_json")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"password": "secret-pw"}, "email"),
        ({"email": "ann@example.com"}, "password"),
        ({"email": "not-an-email", "password": "secret-pw"}, "email"),
        ({"email": "", "password": "secret-pw"}, "email"),
        ({"email": 42, "password": "secret-pw"}, "email"),
        ({"email": "ann@example.com", "password": None}, "password"),
        ({"email": "ann@example.com", "password": ["x"]}, "password"),
        ({"email": "ann@example.com", "password": "é" * 37}, "password"),  # 74 bytes
        ({"email": "a" * 250 + "@example.com", "password": "secret-pw"}, "email"),
    ],
)
@pytest.mark.parametrize("path", ["/auth/v1/signup", "/auth/v1/token?grant_type=password"])
def test_validation_failed_names_the_field(api, path, body, field):
    error = assert_auth_error(api.post(path, json=body), 400, "validation_failed")
    assert field in error["msg"]


def test_sign_up_data_must_be_an_object_with_string_profile_fields(api):
    body = {"email": "ann@example.com", "password": "secret-pw"}
    assert_auth_error(api.post("/auth/v1/signup", json={**body, "data": "x"}), 400, "validation_failed")
    assert_auth_error(
        api.post("/auth/v1/signup", json={**body, "data": {"first_name": 7}}), 400, "validation_failed"
    )


def test_refresh_without_a_token_is_a_validation_error(api):
    error = assert_auth_error(
        api.post("/auth/v1/token?grant_type=refresh_token", json={}), 400, "validation_failed"
    )
    assert "refresh_token" in error["msg"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"nickname": "x"}, "nickname"),
        ({"first_name": 5}, "first_name"),
        ({"email": "nope"}, "email"),
        ({"password": "p" * 73}, "password"),
        ({"data": [1]}, "data"),
        ({"data": {"username": {"a": 1}}}, "username"),
    ],
)
def test_update_refuses_unknown_and_malformed_fields(api, body, field):
    token = api.sign_up(first_name="Ann")["access_token"]
    error = assert_auth_error(api.patch("/auth/v1/user", token=token, json=body), 400, "validation_failed")
    assert field in error["msg"]
    assert api.get("/auth/v1/user", token=token).json["user_metadata"]["first_name"] == "Ann"


@pytest.mark.parametrize("password", ["", "12345", "abcde"])
def test_weak_password(api, password):
    body = {"email": "ann@example.com", "password": password}
    error = assert_auth_error(api.post("/auth/v1/signup", json=body), 422, "weak_password")
    assert error["msg"] == "Password should be at least 6 characters."


def test_weak_password_on_update(api):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.patch("/auth/v1/user", token=token, json={"password": "123"}), 422, "weak_password")
    assert api.sign_in().status_code == 200


def test_sign_up_with_a_taken_email_in_any_case(api):
    api.sign_up()
    body = {"email": "ANN@example.com", "password": "other-pw"}
    error = assert_auth_error(api.post("/auth/v1/signup", json=body), 422, "user_already_exists")
    assert error["msg"] == "User already registered"
    assert api.sign_in().status_code == 200


def test_email_change_to_a_taken_email(api):
    api.sign_up("bob@example.com")
    token = api.sign_up()["access_token"]
    assert_auth_error(
        api.patch("/auth/v1/user", token=token, json={"email": "Bob@example.com"}), 422, "email_exists"
    )
    assert api.get("/auth/v1/user", token=token).json["email"] == "ann@example.com"


def test_sign_up_disabled(make_app, anon_key):
    from support import Api

    api = Api(make_app(DISABLE_SIGNUP=True), anon_key)
    assert_auth_error(
        api.post("/auth/v1/signup", json={"email": "a@b.co", "password": "secret-pw"}), 422, "signup_disabled"
    )
    assert api.get("/auth/v1/settings").json["disable_signup"] is True


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic abc", "bearer", "Token abc", "Bearer a b"]
)
def test_no_authorization(api, header):
    headers = {} if header is None else {"Authorization": header}
    for method in ("GET", "PATCH", "PUT"):
        assert_auth_error(
            api.request(method, "/auth/v1/user", headers=headers, json={}), 401, "no_authorization"
        )
    assert_auth_error(api.post("/auth/v1/logout", headers=headers), 401, "no_authorization")


@pytest.mark.parametrize("header", ["Basic abc", "bearer", "Token abc", "Bearer a b"])
def test_a_malformed_authorization_header_is_each_apis_bad_token(api, header):
    headers = {"Authorization": header}
    assert_rest_error(api.get("/rest/v1/", headers=headers), 401)  # PostgREST's body, not GoTrue's
    assert_storage_error(api.get("/storage/v1/bucket", headers=headers), 401, "InvalidJWT")


def test_session_logged_out(api):
    token = api.sign_up()["access_token"]
    assert api.post("/auth/v1/logout", token=token).status_code == 204
    for method in ("GET", "PATCH"):
        assert_auth_error(
            api.request(method, "/auth/v1/user", token=token, json={}), 401, "session_not_found"
        )
    assert_auth_error(api.post("/auth/v1/logout", token=token), 401, "session_not_found")


def test_deleted_user(api, app):
    token = api.sign_up()["access_token"]
    with app.app_context():
        db.session.execute(users_table().delete())
        db.session.commit()
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "user_not_found")


def test_unexpected_failures_are_a_generic_500(api, app, monkeypatch, caplog):
    from auth import accounts

    def explode(*args):
        raise RuntimeError("boom with secret detail")

    token = api.sign_up()["access_token"]
    monkeypatch.setattr(accounts, "user_object", explode)
    error = assert_auth_error(api.get("/auth/v1/user", token=token), 500, "unexpected_failure")
    assert "boom" not in error["msg"]
    assert "boom with secret detail" in caplog.text


def test_unknown_auth_route_and_method(api):
    assert_auth_error(api.get("/auth/v1/nothing"), 404, "not_found")
    response = api.delete("/auth/v1/user")
    assert_auth_error(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]


def test_body_over_one_megabyte(api):
    response = api.post(
        "/auth/v1/signup", data=b"x" * (1024 * 1024 + 1), headers={"Content-Type": "application/json"}
    )
    assert_auth_error(response, 413, "request_too_large")


def test_a_malformed_email_is_refused_in_gotrue_s_words(api):
    response = api.post("/auth/v1/signup", json={"email": "not-an-address", "password": "secret-pw"})
    error = assert_auth_error(response, 400, "validation_failed")
    assert error["msg"] == "Unable to validate email address: invalid format"
