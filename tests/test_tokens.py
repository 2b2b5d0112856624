"""Tokens are checked strictly: API keys and access tokens, attacked."""

import base64
import json
from datetime import UTC, datetime

import jwt
import pytest

from auth import tokens
from support import SECRET, Api, assert_auth_error, assert_rest_error


def b64(data):
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def resign(token, secret=SECRET, algorithm="HS256", **changes):
    claims = jwt.decode(token, options={"verify_signature": False})
    claims.update(changes)
    return jwt.encode(claims, secret, algorithm=algorithm)


def unsigned(token):
    claims = jwt.decode(token, options={"verify_signature": False})
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


# --- API keys


def test_no_api_key_is_refused_on_both_apis_with_the_same_body(app):
    client = app.test_client()
    bodies = []
    for path in ("/auth/v1/user", "/auth/v1/signup", "/rest/v1/anything"):
        response = client.get(path)
        assert response.status_code == 401
        bodies.append(response.json)
    assert (
        bodies[0]
        == bodies[1]
        == bodies[2]
        == {
            "message": "No API key found in request",
            "hint": "No `apikey` request header or url param was found.",
            "code": 401,
            "details": "",
        }
    )


@pytest.mark.parametrize(
    "key",
    [
        "garbage",
        tokens.api_key("anon", "another-secret-" + "y" * 60),
        jwt.encode({"role": "anon", "iss": "minibase", "iat": 1, "exp": 2}, SECRET),
        jwt.encode({"role": "authenticated", "iss": "minibase", "iat": 1, "exp": 2**40}, SECRET),
        jwt.encode({"role": "superuser", "iss": "minibase", "iat": 1, "exp": 2**40}, SECRET),
        jwt.encode({"role": "anon", "iss": "minibase", "iat": 1, "exp": 2**40}, SECRET, algorithm="HS512"),
    ],
    ids=["garbage", "other-secret", "expired", "user-role", "unknown-role", "hs512"],
)
def test_invalid_api_keys(app, key):
    client = app.test_client()
    for path in ("/auth/v1/settings", "/rest/v1/anything"):
        response = client.get(path, headers={"apikey": key})
        assert response.status_code == 401
        assert response.json["message"] == "Invalid API key"


def test_api_key_as_a_query_parameter(app, anon_key):
    assert app.test_client().get(f"/auth/v1/settings?apikey={anon_key}").status_code == 200


def test_user_access_token_is_not_an_api_key(api, app):
    token = api.sign_up()["access_token"]
    response = app.test_client().get("/auth/v1/settings", headers={"apikey": token})
    assert response.status_code == 401


def test_keys_are_stable_and_carry_their_role(monkeypatch):
    """A key minted again later the same year is the same key (`make keys` prints what `make run`
    printed); one minted the next year is another key, and both are valid."""
    anon = tokens.api_key("anon", SECRET)
    now = tokens.now()
    year_end = int(datetime(datetime.fromtimestamp(now, UTC).year, 12, 31, 23, 59, tzinfo=UTC).timestamp())
    monkeypatch.setattr(tokens, "now", lambda: year_end)
    assert tokens.api_key("anon", SECRET) == anon
    monkeypatch.setattr(tokens, "now", lambda: year_end + 120)
    next_year = tokens.api_key("anon", SECRET)
    assert next_year != anon
    assert tokens.api_key_role(next_year, SECRET) == tokens.api_key_role(anon, SECRET) == "anon"
    monkeypatch.undo()
    claims = jwt.decode(anon, SECRET, algorithms=["HS256"], issuer="minibase")
    assert claims["role"] == "anon" and claims["exp"] - claims["iat"] >= 10 * 365 * 24 * 3600
    assert tokens.api_key_role(tokens.api_key("service_role", SECRET), SECRET) == "service_role"


def test_health_needs_no_api_key(app):
    response = app.test_client().get("/health")
    assert response.status_code == 200 and response.json == {"status": "ok"}


# --- access tokens


def test_access_token_claims(api):
    session = api.sign_up(first_name="Ann")
    claims = jwt.decode(session["access_token"], SECRET, algorithms=["HS256"], audience="authenticated")
    assert claims["sub"] == str(session["user"]["id"])
    assert claims["role"] == "authenticated" and claims["aud"] == "authenticated"
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["email"] == "ann@example.com" and claims["phone"] == ""
    assert claims["session_id"] and claims["is_anonymous"] is False and claims["aal"] == "aal1"
    assert claims["amr"][0]["method"] == "password"
    assert claims["user_metadata"]["first_name"] == "Ann"
    assert claims["app_metadata"]["provider"] == "email"
    assert claims["iss"] == "minibase"


def forged_tokens(session):
    token = session["access_token"]
    return {
        "alg-none": unsigned(token),
        "other-secret": resign(token, secret="another-secret-" + "z" * 60),
        "hs512": resign(token, algorithm="HS512"),
        "expired": resign(token, exp=tokens.now() - 10, iat=tokens.now() - 4000),
        "other-user": resign(token, sub="999999"),
        "no-session": resign(token, session_id=None),
        "unknown-session": resign(token, session_id="00000000-0000-0000-0000-000000000000"),
        "wrong-audience": resign(token, aud="other"),
        "refresh-token": session["refresh_token"],
        "truncated": token[:-5],
        "not-a-jwt": "hello",
        "empty-segments": "..",
        "not-ascii": "\ud800.e30.x",  # no HTTP client can send it, but the test client can
    }


FORGERIES = [
    "alg-none",
    "other-secret",
    "hs512",
    "expired",
    "other-user",
    "no-session",
    "unknown-session",
    "wrong-audience",
    "refresh-token",
    "truncated",
    "not-a-jwt",
    "empty-segments",
    "not-ascii",
]


@pytest.mark.parametrize("kind", FORGERIES)
def test_forged_access_tokens_are_401_on_both_apis(api, kind):
    token = forged_tokens(api.sign_up())[kind]
    expected = "session_not_found" if kind == "unknown-session" else "bad_jwt"
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, expected)
    assert_auth_error(api.patch("/auth/v1/user", token=token, json={"about": "x"}), 401, expected)
    refused = assert_auth_error(api.post("/auth/v1/logout", token=token), 401, expected)
    if expected == "bad_jwt" and kind != "expired":  # GoTrue's words, which auth-js's suite checks
        prefix = "invalid JWT: unable to parse or verify signature, "
        assert refused["msg"].startswith(prefix) and len(refused["msg"]) > len(prefix), refused
    assert_rest_error(api.get("/rest/v1/anything", token=token), 401)


def test_rs256_confusion_is_refused(api):
    session = api.sign_up()
    header = b64({"alg": "RS256", "typ": "JWT"})
    payload = session["access_token"].split(".")[1]
    token = f"{header}.{payload}.{session['access_token'].split('.')[2]}"
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "bad_jwt")


def test_an_api_key_as_bearer_is_no_user(api, anon_key, service_key):
    for key in (anon_key, service_key):
        assert_auth_error(api.get("/auth/v1/user", token=key), 401, "bad_jwt")


def test_the_anon_key_as_bearer_is_accepted_where_no_user_is_needed(api, anon_key):
    assert api.get("/auth/v1/settings", token=anon_key).status_code == 200


def test_an_expired_token_from_a_moved_clock(api, monkeypatch):
    api.sign_up()
    real_now = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: real_now - 3700)
    token = api.sign_in().json["access_token"]
    monkeypatch.undo()
    error = assert_auth_error(api.get("/auth/v1/user", token=token), 401, "bad_jwt")
    assert "expired" in error["msg"].lower()


def test_service_key_on_auth_routes(app, service_key):
    service = Api(app, service_key)
    assert service.get("/auth/v1/settings").status_code == 200


@pytest.mark.parametrize(
    "claims",
    [
        {"iss": "supabase", "ref": "abcdefghijklmnop", "role": "anon", "iat": 1700000000, "exp": 2**40},
        {"iss": "supabase", "role": "service_role", "iat": 1700000000},
        {"role": "anon"},
    ],
    ids=["supabase-anon", "supabase-service-no-exp", "bare"],
)
def test_supabase_style_keys_signed_with_the_secret_are_keys(app, claims):
    """A self-hosted Supabase's keys keep working when its JWT secret is kept: any issuer, and no
    expiry at all, as at Supabase."""
    key = jwt.encode(claims, SECRET)
    client = app.test_client()
    assert client.get("/auth/v1/settings", headers={"apikey": key}).status_code == 200
    assert tokens.api_key_role(key, SECRET) == claims["role"]
    assert tokens.api_key_role(jwt.encode(claims, "another-secret-" + "y" * 60), SECRET) is None


def test_a_key_whose_exp_is_not_a_number_is_refused(app):
    key = jwt.encode({"role": "anon", "iss": "supabase", "exp": "never"}, SECRET)
    assert app.test_client().get("/auth/v1/settings", headers={"apikey": key}).status_code == 401


def test_a_remembered_api_key_still_expires(app, monkeypatch):
    start = tokens.now()
    key = jwt.encode({"role": "anon", "iss": "minibase", "iat": start, "exp": start + 100}, SECRET)
    client = app.test_client()
    assert client.get("/auth/v1/settings", headers={"apikey": key}).status_code == 200
    monkeypatch.setattr(tokens, "now", lambda: start + 101)
    response = client.get("/auth/v1/settings", headers={"apikey": key})
    assert response.status_code == 401 and response.json["message"] == "Invalid API key"
