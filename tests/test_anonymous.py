"""Anonymous sign-ins (ANONYMOUS_USERS_ENABLED): signInAnonymously() makes a user with an id, a
session and row policies before they give an address; converting keeps the id and every row; old
ones are purged. On both databases: the anonymous user is a row of the users table."""

from datetime import timedelta

import jwt
import pytest
import sqlalchemy as sa

from auth import anonymous, tokens
from support import Api, SupabaseJs, assert_auth_error, assert_rest_error, serve_app

TABLES = """
[tables.carts]
select = "owner"
insert = "owner"
owner_column = "user_id"

[tables.reviews]
select = "anon"
insert = "authenticated"

[tables.reviews.policies]
insert = "user_id = :uid AND :is_anonymous = 0"
"""


@pytest.fixture
def make(make_app, database_url, tmp_path, anon_key):
    with sa.create_engine(database_url).begin() as connection:
        for table in ("carts", "reviews"):
            connection.execute(
                sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, user_id INTEGER, item TEXT)")
            )
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)

    def build(**settings):
        settings = {"TABLES_CONFIG": str(config), "ANONYMOUS_USERS_ENABLED": True, **settings}
        return Api(make_app(**settings), anon_key)

    return build


@pytest.fixture
def api(make):
    return make()


def visit(api, data=None):
    response = api.post("/auth/v1/signup", json={} if data is None else {"data": data})
    assert response.status_code == 200, response.json
    return response.json


def claims(token):
    return jwt.decode(token, options={"verify_signature": False})


def users_row(api, user_id):
    with api.app.app_context():
        from extensions import db
        from models import users_table

        users = users_table()
        return db.session.execute(sa.select(users).where(users.c.user_id == user_id)).first()


def test_a_visitor_is_a_user_with_an_id_a_session_and_no_address(api):
    session = visit(api, {"cart": "blue"})
    user = session["user"]
    assert user["is_anonymous"] is True and user["email"] == "" and user["identities"] == []
    assert user["app_metadata"] == {} and user["user_metadata"] == {"cart": "blue"}
    assert user["email_confirmed_at"] is None
    token = claims(session["access_token"])
    assert token["is_anonymous"] is True and token["email"] == "" and token["amr"][0]["method"] == "anonymous"
    assert token["sub"] == str(user["id"])
    assert api.get("/auth/v1/user", token=session["access_token"]).json["is_anonymous"] is True
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert claims(refreshed.json["access_token"])["is_anonymous"] is True
    # The row the application that shares the table sees: the marked address, a password no one has.
    row = users_row(api, user["id"])
    assert row.email.endswith("@anonymous.invalid") and row.password.startswith("!") and row.active == 1
    assert row.email not in str(session)  # never shown
    second = visit(api)["user"]
    assert second["id"] != user["id"] and users_row(api, second["id"]).email != row.email


def test_anonymous_sign_ins_are_off_by_default_and_honour_disabled_sign_ups(make):
    off = make(ANONYMOUS_USERS_ENABLED=False)
    assert_auth_error(off.post("/auth/v1/signup", json={}), 422, "anonymous_provider_disabled")
    closed = make(DISABLE_SIGNUP=True)
    assert_auth_error(closed.post("/auth/v1/signup", json={}), 422, "signup_disabled")
    # A password without an address is still a request missing its email, not an anonymous one.
    assert_auth_error(off.post("/auth/v1/signup", json={"password": "secret-pw"}), 400, "validation_failed")
    on = make()
    assert_auth_error(on.post("/auth/v1/signup", json={"password": "secret-pw"}), 400, "validation_failed")


def test_anonymous_sign_ups_are_rate_limited_per_ip(make):
    api = make(RATE_LIMITS=True, RATE_LIMIT_ANONYMOUS_USERS=2)
    here = {"environ_base": {"REMOTE_ADDR": "10.0.0.1"}}
    for _ in range(2):
        assert api.post("/auth/v1/signup", json={}, **here).status_code == 200
    refused = api.post("/auth/v1/signup", json={}, **here)
    assert_auth_error(refused, 429, "over_request_rate_limit")
    assert int(refused.headers["Retry-After"]) > 0
    assert api.post("/auth/v1/signup", json={}, environ_base={"REMOTE_ADDR": "10.0.0.2"}).status_code == 200
    registered = api.post(
        "/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"}, **here
    )
    assert registered.status_code == 200  # a sign-up with an address has its own limit


def test_a_visitor_converts_in_place_keeping_the_id_and_the_rows(api):
    session = visit(api)
    user_id, token = session["user"]["id"], session["access_token"]
    assert (
        api.post("/rest/v1/carts", token=token, json={"id": 1, "user_id": user_id, "item": "tea"}).status_code
        == 201
    )
    # A password alone is GoTrue's 422; an address of the reserved domain is nobody's.
    no_address = api.put("/auth/v1/user", token=token, json={"password": "secret-pw"})
    assert_auth_error(no_address, 422, "validation_failed")
    assert (
        no_address.json["msg"]
        == "Updating password of an anonymous user without an email or phone is not allowed"
    )
    reserved = api.put("/auth/v1/user", token=token, json={"email": "me@anonymous.invalid"})
    assert_auth_error(reserved, 400, "validation_failed")
    converted = api.put(
        "/auth/v1/user", token=token, json={"email": "ann@example.com", "password": "secret-pw"}
    )
    assert converted.status_code == 200, converted.json
    user = converted.json
    assert (user["id"], user["is_anonymous"], user["email"]) == (user_id, False, "ann@example.com")
    assert user["app_metadata"]["provider"] == "email"
    signed_in = api.sign_in()
    assert signed_in.status_code == 200 and signed_in.json["user"]["id"] == user_id
    fresh = signed_in.json["access_token"]
    assert claims(fresh)["is_anonymous"] is False and claims(fresh)["email"] == "ann@example.com"
    assert [row["item"] for row in api.get("/rest/v1/carts", token=fresh).json] == ["tea"]
    assert users_row(api, user_id).email == "ann@example.com"


def test_row_policies_tell_anonymous_users_apart(api):
    session = visit(api)
    user_id, token = session["user"]["id"], session["access_token"]
    review = {"id": 1, "user_id": user_id, "item": "great"}
    assert_rest_error(api.post("/rest/v1/reviews", token=token, json=review), 403)
    api.put("/auth/v1/user", token=token, json={"email": "ann@example.com"})
    assert api.post("/rest/v1/reviews", token=token, json=review).status_code == 201


def test_what_anonymous_users_may_not_do(api, service_key):
    token = visit(api)["access_token"]
    reauthenticate = api.get("/auth/v1/reauthenticate", token=token)
    assert_auth_error(reauthenticate, 400, "validation_failed")
    assert (
        reauthenticate.json["msg"] == "Reauthentication requires the user to have an email or a phone number"
    )
    for method, path in (
        ("POST", "/auth/v1/factors"),
        ("POST", f"/auth/v1/factors/{'0' * 8}-0000-0000-0000-{'0' * 12}/challenge"),
    ):
        refused = api.request(method, path, token=token, json={"factor_type": "totp"})
        assert_auth_error(refused, 403, "no_authorization")
        assert refused.json["msg"] == "Anonymous user not allowed to perform these actions"
    assert_auth_error(api.get("/auth/v1/admin/users", token=token), 403, "not_admin")
    # The placeholder address signs nobody in, and cannot be signed up with.
    row = users_row(api, claims(token)["sub"])
    password = api.post("/auth/v1/token?grant_type=password", json={"email": row.email, "password": "x" * 8})
    assert_auth_error(password, 400, "validation_failed")
    taken = api.post("/auth/v1/signup", json={"email": row.email, "password": "secret-pw"})
    assert_auth_error(taken, 400, "validation_failed")
    # The administrator sees them as anonymous.
    listed = Api(api.app, service_key).get("/auth/v1/admin/users").json["users"]
    assert [(user["email"], user["is_anonymous"]) for user in listed] == [("", True)]


def test_old_anonymous_users_are_purged_and_converted_or_active_ones_kept(api, monkeypatch):
    real_now = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: real_now - 40 * 86400)
    old, converting, returning = visit(api), visit(api), visit(api)
    monkeypatch.setattr(tokens, "now", lambda: real_now)
    with api.app.app_context():  # their tokens expired long ago: one converts, one signs in again
        from auth import accounts, sessions
        from database import transactions

        transactions.write(accounts.change_user, converting["user"]["id"], {"email": "ann@example.com"})
        transactions.write(sessions.start, returning["user"]["id"], "anonymous")
    young = visit(api)
    result = api.app.test_cli_runner().invoke(args=["purge-anonymous", "--days", "30"])
    assert result.exit_code == 0, result.output
    assert "deleted 1 anonymous users" in result.output
    assert users_row(api, old["user"]["id"]) is None
    with api.app.app_context():  # nothing the service kept of them is left
        from extensions import db
        from models.auth import Profile, Session

        for model in (Session, Profile):
            kept = db.session.execute(sa.select(model).where(model.user_id == old["user"]["id"])).first()
            assert kept is None, model
    for kept in (converting, returning, young):
        assert users_row(api, kept["user"]["id"]) is not None


def test_a_visitor_converting_while_the_purge_runs_keeps_the_account(api, monkeypatch):
    """The purge lists its candidates, then deletes each only while it is still anonymous and idle:
    a conversion between the two keeps the user and everything the service keeps of them."""
    real_now = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: real_now - 25 * 86400)
    session = visit(api)
    monkeypatch.setattr(tokens, "now", lambda: real_now)
    user_id = session["user"]["id"]
    with api.app.app_context():
        from auth import accounts
        from database import transactions

        cutoff = tokens.utcnow() - timedelta(days=20)
        assert transactions.read(anonymous._candidates, cutoff, 0) == [user_id]
        transactions.write(accounts.change_user, user_id, {"email": "ann@example.com"})
        assert transactions.write(anonymous._purge_one, user_id, cutoff) == 0
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert refreshed.status_code == 200 and refreshed.json["user"]["email"] == "ann@example.com"


@pytest.fixture
def served(make):
    api = make()
    base, stop = serve_app(api.app)
    yield base, api
    stop()


@pytest.mark.slow  # node
def test_supabase_js_signs_in_anonymously_and_becomes_a_registered_user(served, anon_key, node_modules):
    """auth-js's own signInAnonymously tests, through the SDK, then updateUser({email})."""
    base, api = served
    with SupabaseJs(base, anon_key) as js:
        first = js("visitor", "auth.signInAnonymously")
        assert first["error"] is None and first["data"]["user"]["is_anonymous"] is True
        assert first["data"]["session"]["access_token"]
        data = {"name": "Ann", "age": 7}
        second = js("other", "auth.signInAnonymously", {"options": {"data": data}})
        assert second["error"] is None and second["data"]["user"]["user_metadata"] == data
        updated = js("visitor", "auth.updateUser", {"email": "ann@example.com"})
        assert updated["error"] is None
        user = updated["data"]["user"]
        assert (user["id"], user["is_anonymous"]) == (first["data"]["user"]["id"], False)
        refused = js("other", "auth.reauthenticate")
        assert (
            refused["error"]["message"]
            == "Reauthentication requires the user to have an email or a phone number"
        )
