"""Sessions and refresh tokens: rotation, the reuse interval, theft, logout,
racing refreshes, and two instances on one database."""

import threading

import jwt
import pytest
import requests
from sqlalchemy import func, select

from auth import tokens
from extensions import db
from models.auth import RefreshToken, Session
from support import SECRET, Api, assert_auth_error

REFRESH = "/auth/v1/token?grant_type=refresh_token"


def refresh(api, token, **kwargs):
    return api.post(REFRESH, json={"refresh_token": token}, **kwargs)


def later(monkeypatch, seconds):
    """Move the clock forward by `seconds` (from wherever it stands)."""
    start = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: start + seconds)


def test_refresh_rotates_the_token_and_keeps_the_session(api):
    first = api.sign_up()
    second = refresh(api, first["refresh_token"])
    assert second.status_code == 200
    body = second.json
    assert body["refresh_token"] != first["refresh_token"]
    assert body["user"]["email"] == "ann@example.com" and body["token_type"] == "bearer"
    old = jwt.decode(first["access_token"], options={"verify_signature": False})
    new = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert old["session_id"] == new["session_id"]
    assert api.get("/auth/v1/user", token=body["access_token"]).status_code == 200
    third = refresh(api, body["refresh_token"])
    assert third.status_code == 200


def test_reuse_within_the_interval_returns_the_current_session(api):
    first = api.sign_up()
    child = refresh(api, first["refresh_token"]).json
    again = refresh(api, first["refresh_token"])
    assert again.status_code == 200
    assert again.json["refresh_token"] == child["refresh_token"]
    assert refresh(api, child["refresh_token"]).status_code == 200


def test_reuse_after_the_interval_is_theft_and_revokes_the_session(api, monkeypatch):
    first = api.sign_up()
    other = api.sign_in().json
    child = refresh(api, first["refresh_token"]).json
    later(monkeypatch, 11)
    error = assert_auth_error(refresh(api, first["refresh_token"]), 400, "refresh_token_already_used")
    assert error["msg"] == "Invalid Refresh Token: Already Used"
    assert_auth_error(refresh(api, child["refresh_token"]), 400, "refresh_token_not_found")
    assert_auth_error(api.get("/auth/v1/user", token=child["access_token"]), 401, "session_not_found")
    assert_auth_error(api.get("/auth/v1/user", token=first["access_token"]), 401, "session_not_found")
    # the user's other session is untouched
    assert api.get("/auth/v1/user", token=other["access_token"]).status_code == 200


def test_reuse_interval_is_configurable(make_app, anon_key, monkeypatch):
    api = Api(make_app(REFRESH_TOKEN_REUSE_INTERVAL=0), anon_key)
    first = api.sign_up()
    assert refresh(api, first["refresh_token"]).status_code == 200
    later(monkeypatch, 1)
    assert_auth_error(refresh(api, first["refresh_token"]), 400, "refresh_token_already_used")


def test_refresh_after_logout_is_not_found(api):
    session = api.sign_up()
    assert api.post("/auth/v1/logout", token=session["access_token"]).status_code == 204
    error = assert_auth_error(refresh(api, session["refresh_token"]), 400, "refresh_token_not_found")
    assert error["msg"] == "Invalid Refresh Token: Refresh Token Not Found"


def test_refresh_past_its_lifetime_is_session_expired(make_app, anon_key, monkeypatch):
    api = Api(make_app(REFRESH_TOKEN_EXPIRY=600), anon_key)
    session = api.sign_up()
    later(monkeypatch, 601)
    assert_auth_error(refresh(api, session["refresh_token"]), 400, "session_expired")


def test_refresh_is_sliding(make_app, anon_key, monkeypatch):
    api = Api(make_app(REFRESH_TOKEN_EXPIRY=600), anon_key)
    token = api.sign_up()["refresh_token"]
    for _ in range(3):  # 1500 s in all, each step within the 600 s lifetime
        later(monkeypatch, 500)
        response = refresh(api, token)
        assert response.status_code == 200, response.json
        token = response.json["refresh_token"]


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "",
        "a.b.c",
        jwt.encode(
            {"iss": "minibase", "typ": "refresh", "jti": "x", "sid": "y", "iat": 1, "exp": 2**40}, SECRET
        ),
        jwt.encode(
            {"iss": "minibase", "typ": "refresh", "jti": "x", "sid": "y", "iat": 1, "exp": 2**40}, "k" * 64
        ),
    ],
    ids=["garbage", "empty", "three-dots", "unknown-jti", "other-secret"],
)
def test_unknown_or_malformed_refresh_tokens(api, token):
    assert_auth_error(refresh(api, token), 400, "refresh_token_not_found")


def test_an_access_token_is_not_a_refresh_token(api):
    session = api.sign_up()
    assert_auth_error(refresh(api, session["access_token"]), 400, "refresh_token_not_found")


def test_a_refresh_token_of_another_session_cannot_be_grafted(api):
    session = api.sign_up()
    claims = jwt.decode(session["refresh_token"], SECRET, algorithms=["HS256"], issuer="minibase")
    forged = jwt.encode({**claims, "sid": "00000000-0000-0000-0000-000000000000"}, SECRET)
    assert_auth_error(refresh(api, forged), 400, "refresh_token_not_found")


def test_racing_refreshes_of_one_token_all_get_the_same_child(app, live_server, anon_key):
    api = Api(app, anon_key)
    token = api.sign_up()["refresh_token"]
    results = []

    def hit():
        response = requests.post(
            live_server + REFRESH, json={"refresh_token": token}, headers={"apikey": anon_key}, timeout=30
        )
        results.append((response.status_code, response.json().get("refresh_token")))

    threads = [threading.Thread(target=hit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in results] == [200] * 6, results
    assert len({child for _, child in results}) == 1
    with app.app_context():
        live = db.session.execute(
            select(func.count()).select_from(RefreshToken).where(RefreshToken.revoked.is_(False))
        ).scalar()
    assert live == 1


def test_two_instances_on_one_database_behave_as_one(make_app, anon_key):
    a, b = Api(make_app(), anon_key), Api(make_app(), anon_key)
    session = a.sign_up()
    assert b.get("/auth/v1/user", token=session["access_token"]).status_code == 200
    rotated = refresh(b, session["refresh_token"]).json
    assert a.get("/auth/v1/user", token=rotated["access_token"]).status_code == 200
    assert a.post("/auth/v1/logout", token=rotated["access_token"]).status_code == 204
    assert_auth_error(b.get("/auth/v1/user", token=rotated["access_token"]), 401, "session_not_found")
    assert_auth_error(refresh(b, rotated["refresh_token"]), 400, "refresh_token_not_found")


def test_logout_removes_the_sessions_rows(api, app):
    session = api.sign_up()
    api.post("/auth/v1/logout", token=session["access_token"])
    with app.app_context():
        assert db.session.execute(select(func.count()).select_from(Session)).scalar() == 0
        assert db.session.execute(select(func.count()).select_from(RefreshToken)).scalar() == 0
