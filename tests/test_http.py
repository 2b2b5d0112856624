"""The whole auth flow over HTTP against the real waitress server: plain requests, as the seed's
clients do, and the official supabase-auth client, unchanged."""

import pytest
import requests


def test_plain_http_client_flow(live_server, anon_key):
    base = live_server + "/auth/v1"
    headers = {"apikey": anon_key, "Content-Type": "application/json"}
    signup = requests.post(
        f"{base}/signup",
        json={"email": "ann@example.com", "password": "secret-pw", "data": {"first_name": "Ann"}},
        headers=headers,
        timeout=10,
    )
    assert signup.status_code == 200 and signup.json()["user"]["id"] == 1
    signin = requests.post(
        f"{base}/token?grant_type=password",
        json={"email": "ann@example.com", "password": "secret-pw"},
        headers=headers,
        timeout=10,
    )
    session = signin.json()
    bearer = {**headers, "Authorization": f"Bearer {session['access_token']}"}
    assert requests.get(f"{base}/user", headers=bearer, timeout=10).json()["email"] == "ann@example.com"
    updated = requests.patch(f"{base}/user", json={"about": "hello"}, headers=bearer, timeout=10)
    assert updated.status_code == 200 and updated.json()["user_metadata"]["about"] == "hello"
    refreshed = requests.post(
        f"{base}/token?grant_type=refresh_token",
        json={"refresh_token": session["refresh_token"]},
        headers=headers,
        timeout=10,
    )
    assert refreshed.status_code == 200
    logout = requests.post(f"{base}/logout", headers=bearer, timeout=10)
    assert logout.status_code == 204 and logout.content == b""
    after = requests.get(f"{base}/user", headers=bearer, timeout=10)
    assert after.status_code == 401 and after.json()["error_code"] == "session_not_found"
    no_key = requests.get(f"{base}/user", timeout=10)
    assert no_key.status_code == 401 and no_key.json()["message"] == "No API key found in request"
    assert requests.get(live_server + "/health", timeout=10).json() == {"status": "ok"}


def test_malformed_requests_over_the_wire_are_4xx(live_server, anon_key):
    base = live_server + "/auth/v1"
    headers = {"apikey": anon_key, "Content-Type": "application/json"}
    cases = [
        requests.post(f"{base}/signup", data=b"\x00\xff{", headers=headers, timeout=10),
        requests.post(f"{base}/token?grant_type=password", data="[]", headers=headers, timeout=10),
        requests.get(f"{base}/user", headers={**headers, "Authorization": "Bearer \u00e9"}, timeout=10),
        requests.post(f"{base}/signup", data=b"x" * (2 * 1024 * 1024), headers=headers, timeout=10),
    ]
    assert [c.status_code for c in cases] == [400, 400, 401, 413]
    for case in cases:
        assert case.headers["Content-Type"] == "application/json"


@pytest.fixture
def gotrue(live_server, anon_key):
    supabase_auth = pytest.importorskip("supabase_auth")
    client = supabase_auth.SyncGoTrueClient(
        url=live_server + "/auth/v1",
        headers={"apikey": anon_key, "Authorization": f"Bearer {anon_key}"},
        auto_refresh_token=False,
        persist_session=False,
    )
    yield client


def test_official_supabase_auth_client(gotrue):
    from supabase_auth.errors import AuthApiError

    signed_up = gotrue.sign_up(
        {"email": "sam@example.com", "password": "secret-pw", "options": {"data": {"first_name": "Sam"}}}
    )
    assert signed_up.user.email == "sam@example.com" and signed_up.user.id == "1"
    assert signed_up.session.access_token
    signed_in = gotrue.sign_in_with_password({"email": "sam@example.com", "password": "secret-pw"})
    assert signed_in.user.user_metadata["first_name"] == "Sam"
    assert gotrue.get_user().user.email == "sam@example.com"
    updated = gotrue.update_user({"data": {"about": "hi", "pet": "cat"}})
    assert updated.user.user_metadata["about"] == "hi" and updated.user.user_metadata["pet"] == "cat"
    refreshed = gotrue.refresh_session()
    assert refreshed.session.refresh_token != signed_in.session.refresh_token
    with pytest.raises(AuthApiError) as wrong:
        gotrue.sign_in_with_password({"email": "sam@example.com", "password": "wrong-pw"})
    assert wrong.value.code == "invalid_credentials" and wrong.value.status == 400
    gotrue.sign_out()
    assert gotrue.get_session() is None


def test_status_lines_carry_the_reason_phrase_as_http_writes_it(live_server, anon_key):
    """GoTrue and PostgREST answer "404 Not Found", not Werkzeug's "404 NOT FOUND"."""
    headers = {"apikey": anon_key}
    signup = requests.post(
        f"{live_server}/auth/v1/signup",
        json={"email": "reason@example.com", "password": "secret-pw"},
        headers=headers,
        timeout=10,
    )
    missing = requests.get(f"{live_server}/auth/v1/nothing-here", headers=headers, timeout=10)
    wrong_method = requests.delete(f"{live_server}/auth/v1/settings", headers=headers, timeout=10)
    assert (signup.status_code, signup.reason) == (200, "OK")
    assert (missing.status_code, missing.reason) == (404, "Not Found")
    assert (wrong_method.status_code, wrong_method.reason) == (405, "Method Not Allowed")


@pytest.mark.parametrize(
    "path", ["/storage/v1/object/avatars/a.png", "/functions/v1/hello", "/rest/v1/items", "/auth/v1/token"]
)
def test_every_preflight_is_answered_with_cors_headers(live_server, path):
    """A preflight to a path minibase does not serve answers 200 with CORS headers, so the browser sends
    the request and the app reads the JSON 404 instead of "Failed to fetch"."""
    asked = "authorization,apikey,x-client-info,x-upsert,x-supabase-api-version,accept-profile,prefer,range"
    response = requests.options(
        f"{live_server}{path}",
        headers={
            "Origin": "https://app.example.com",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": asked,
        },
        timeout=10,
    )
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    allowed = {name.strip() for name in response.headers["Access-Control-Allow-Headers"].split(",")}
    assert set(asked.split(",")) <= allowed
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
