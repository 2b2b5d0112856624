"""Third-party sign-in, PKCE and the id_token grant against a real OpenID Connect provider (panva's
oidc-provider under node, tests/js/oidc_provider.mjs) on 127.0.0.1, and GitHub's API shape served in
front of it; minibase over waitress, as a browser reaches it. Skipped where node is not installed."""

import base64
import hashlib
import json
import os
import re
import secrets
import subprocess
import time
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from auth import tokens
from support import free_port, serve_app

JS = __import__("pathlib").Path(__file__).resolve().parent / "js"
APP = "http://app.example/welcome"  # the app's page: never fetched, only read off a Location
ACCOUNTS = {
    "alice": {"email": "alice@example.com", "email_verified": True, "name": "Alice", "github_id": 101},
    "mallory": {"email": "victim@example.com", "email_verified": False, "name": "Mallory", "github_id": 102},
}
SECRET = "client-secret-" + "s" * 30


@pytest.fixture(scope="module")
def provider_key():
    return RSAKey.generate_key(2048, parameters={"kid": "provider-key", "use": "sig", "alg": "RS256"})


def start_provider(node_modules, key, redirect_uri, github=False):
    port = free_port()
    clients = [
        {"client_id": "minibase", "client_secret": SECRET, "redirect_uris": [redirect_uri],
         "token_endpoint_auth_method": "client_secret_post" if github else "client_secret_basic"},
        {"client_id": "phone-app", "client_secret": SECRET, "redirect_uris": [APP]},
        {"client_id": "another-app", "client_secret": SECRET, "redirect_uris": [APP]},
    ]  # fmt: skip
    env = {
        **os.environ,
        "PORT": str(port),
        "CLIENTS": json.dumps(clients),
        "ACCOUNTS": json.dumps(ACCOUNTS),
        "JWKS": json.dumps({"keys": [key.as_dict(private=True)]}),
        "GITHUB": "1" if github else "",
    }
    process = subprocess.Popen(
        ["node", "oidc_provider.mjs"],
        cwd=JS,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return f"http://127.0.0.1:{port}", process


@pytest.fixture
def world(make_app, node_modules, provider_key):
    """minibase over waitress with the provider as `keycloak` (by discovery) and as `github`."""
    port = free_port()
    callback = f"http://127.0.0.1:{port}/auth/v1/callback"
    issuer, oidc = start_provider(node_modules, provider_key, callback)
    github_url, github = start_provider(node_modules, provider_key, callback, github=True)
    settings = {"EXTERNAL_KEYCLOAK_ENABLED": True, "EXTERNAL_KEYCLOAK_CLIENT_ID": "minibase,phone-app",
                "EXTERNAL_KEYCLOAK_SECRET": SECRET, "EXTERNAL_KEYCLOAK_URL": issuer,
                "EXTERNAL_GITHUB_ENABLED": True, "EXTERNAL_GITHUB_CLIENT_ID": "minibase",
                "EXTERNAL_GITHUB_SECRET": SECRET, "EXTERNAL_GITHUB_URL": github_url,
                "API_EXTERNAL_URL": f"http://127.0.0.1:{port}", "SITE_URL": "http://app.example",
                "REDIRECT_ALLOW_LIST": "http://app.example/**"}  # fmt: skip
    app = make_app(**settings)
    base, stop = serve_app(app, port=port)
    yield {"base": base, "issuer": issuer, "app": app}
    stop()
    for process in (oidc, github):
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()


def browse(url, login="alice", deny=False, stop_at=APP):
    """A browser following redirects and answering the provider's sign-in and consent forms, up to
    the first Location that leaves for the app (or for `stop_at`); that URL."""
    browser = requests.Session()
    for _ in range(30):
        response = browser.get(url, allow_redirects=False, timeout=10)
        if response.is_redirect:
            url = urljoin(url, response.headers["Location"])
            if url.startswith((stop_at, "http://app.example")):
                return url
            continue
        assert response.status_code == 200, response.text[:500]
        if deny:
            url = urljoin(url, urlsplit(url).path + "/abort")
            continue
        prompt = re.search(r'name="prompt" value="(\w+)"', response.text).group(1)
        response = browser.post(
            url, data={"prompt": prompt, "login": login}, allow_redirects=False, timeout=10
        )
        url = urljoin(url, response.headers["Location"])
    raise AssertionError("too many redirects")


def fragment(url):
    return {key: values[0] for key, values in parse_qs(urlsplit(url).fragment).items()}


def query(url):
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def authorize_url(world, provider="keycloak", **params):
    params = {"provider": provider, "redirect_to": APP, **params}
    return f"{world['base']}/auth/v1/authorize?" + "&".join(f"{k}={v}" for k, v in params.items())


def headers(anon_key, token=None):
    sent = {"apikey": anon_key}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return sent


def user_of(world, anon_key, session):
    response = requests.get(
        f"{world['base']}/auth/v1/user", headers=headers(anon_key, session["access_token"])
    )
    assert response.status_code == 200, response.text
    return response.json()


def password_of(world, email):
    from extensions import db
    from models import users_table

    with world["app"].app_context():
        users = users_table()
        return db.session.execute(users.select().where(users.c.email == email)).first().password


def test_a_provider_sign_up_then_sign_in(world, anon_key):
    first = fragment(browse(authorize_url(world)))
    assert first["token_type"] == "bearer" and first["refresh_token"]
    user = user_of(world, anon_key, first)
    assert user["email"] == "alice@example.com"
    assert user["app_metadata"] == {"provider": "keycloak", "providers": ["keycloak"]}
    [identity] = user["identities"]
    assert identity["provider"] == "keycloak" and identity["id"] == "alice"
    assert identity["identity_data"]["email_verified"] is True
    claims = json.loads(base64.urlsafe_b64decode(first["access_token"].split(".")[1] + "=="))
    assert claims["amr"][0]["method"] == "oauth"
    # The row another application reads: a "hash" no password matches.
    stored = password_of(world, "alice@example.com")
    assert stored.startswith("!") and len(stored) == 60
    refused = requests.post(f"{world['base']}/auth/v1/token?grant_type=password", headers=headers(anon_key),
                            json={"email": "alice@example.com", "password": stored})  # fmt: skip
    assert refused.status_code == 400
    again = fragment(browse(authorize_url(world)))
    assert user_of(world, anon_key, again)["id"] == user["id"]
    settings = requests.get(f"{world['base']}/auth/v1/settings", headers=headers(anon_key)).json()
    assert settings["external"] == {"email": True, "github": True, "keycloak": True}


def sign_up(world, anon_key, email, password="secret-pw"):
    response = requests.post(f"{world['base']}/auth/v1/signup", headers=headers(anon_key),
                             json={"email": email, "password": password})  # fmt: skip
    assert response.status_code == 200, response.text
    return response.json()


def test_a_verified_address_links_the_existing_user_and_unlinking_keeps_one_way_in(world, anon_key):
    session = sign_up(world, anon_key, "alice@example.com")
    linked = fragment(browse(authorize_url(world, provider="github")))
    user = user_of(world, anon_key, linked)
    assert user["id"] == session["user"]["id"]
    assert user["app_metadata"]["providers"] == ["email", "github"]
    github = next(i for i in user["identities"] if i["provider"] == "github")
    assert github["id"] == "101" and github["identity_data"]["preferred_username"] == "alice"
    gone = requests.delete(f"{world['base']}/auth/v1/user/identities/{github['identity_id']}",
                           headers=headers(anon_key, linked["access_token"]))  # fmt: skip
    assert gone.status_code == 200 and [i["provider"] for i in gone.json()["identities"]] == ["email"]


def test_the_last_identity_cannot_be_unlinked(world, anon_key):
    session = fragment(browse(authorize_url(world)))
    [identity] = user_of(world, anon_key, session)["identities"]
    refused = requests.delete(f"{world['base']}/auth/v1/user/identities/{identity['identity_id']}",
                              headers=headers(anon_key, session["access_token"]))  # fmt: skip
    assert refused.status_code == 422 and refused.json()["error_code"] == "single_identity_not_deletable"


def test_an_unverified_address_never_takes_over_an_account(world, anon_key):
    victim = sign_up(world, anon_key, "victim@example.com")
    for provider in ("keycloak", "github"):
        landed = browse(authorize_url(world, provider=provider), login="mallory")
        assert "access_token" not in fragment(landed) and "code" not in query(landed)
        assert query(landed)["error_code"] == "provider_email_needs_verification"
        assert fragment(landed)["error"] == "access_denied"
    login = requests.post(f"{world['base']}/auth/v1/token?grant_type=password", headers=headers(anon_key),
                          json={"email": "victim@example.com", "password": "secret-pw"}).json()  # fmt: skip
    assert user_of(world, anon_key, login)["identities"][0]["provider"] == "email"
    assert (
        len(user_of(world, anon_key, login)["identities"]) == 1
        and login["user"]["id"] == victim["user"]["id"]
    )


def pkce_pair():
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def exchange(world, anon_key, code, verifier):
    return requests.post(f"{world['base']}/auth/v1/token?grant_type=pkce", headers=headers(anon_key),
                         json={"auth_code": code, "code_verifier": verifier})  # fmt: skip


def test_pkce_codes_are_single_use_bound_to_their_verifier_and_expire(world, anon_key, monkeypatch):
    verifier, challenge = pkce_pair()
    landed = browse(authorize_url(world, code_challenge=challenge, code_challenge_method="S256"))
    assert "access_token" not in landed
    code = query(landed)["code"]
    wrong = exchange(world, anon_key, code, verifier + "x")
    assert wrong.status_code == 400 and wrong.json()["error_code"] == "bad_code_verifier"
    burned = exchange(world, anon_key, code, verifier)
    assert burned.status_code == 400 and burned.json()["error_code"] == "flow_state_not_found"

    code = query(browse(authorize_url(world, code_challenge=challenge, code_challenge_method="s256")))["code"]
    session = exchange(world, anon_key, code, verifier)
    assert (
        session.status_code == 200
        and user_of(world, anon_key, session.json())["email"] == "alice@example.com"
    )
    twice = exchange(world, anon_key, code, verifier)
    assert twice.status_code == 400 and twice.json()["error_code"] == "flow_state_not_found"

    code = query(browse(authorize_url(world, code_challenge=verifier, code_challenge_method="plain")))["code"]
    later = tokens.now() + 301
    monkeypatch.setattr(tokens, "now", lambda: later)
    expired = exchange(world, anon_key, code, verifier)
    assert expired.status_code == 400 and expired.json()["error_code"] == "flow_state_expired"


@pytest.mark.parametrize(
    "params, error_code",
    [
        ({"code_challenge": "x" * 43}, "validation_failed"),
        ({"code_challenge": "x" * 43, "code_challenge_method": "md5"}, "validation_failed"),
        ({"code_challenge": "short", "code_challenge_method": "s256"}, "validation_failed"),
        ({"provider": "myspace"}, "validation_failed"),
    ],
)
def test_bad_authorize_requests(world, params, error_code):
    response = requests.get(authorize_url(world, **params), allow_redirects=False)
    assert response.status_code == 400 and response.json()["error_code"] == error_code


def test_forged_replayed_expired_state_and_denied_consent(world, monkeypatch):
    base = world["base"]
    claims = {"iss": "minibase", "typ": "oauth_state", "flow": "x", "iat": 1, "exp": 2**40}
    forged = jwt.encode({"alg": "HS256"}, claims, OctKey.import_key("not-our-secret-" + "k" * 40))
    landed = requests.get(f"{base}/auth/v1/callback?code=abc&state={forged}", allow_redirects=False)
    assert landed.status_code == 302 and query(landed.headers["Location"])["error_code"] == "bad_oauth_state"
    assert landed.headers["Location"].startswith("http://app.example")

    callback = browse(authorize_url(world), stop_at=f"{base}/auth/v1/callback")
    assert "access_token" in fragment(requests.get(callback, allow_redirects=False).headers["Location"])
    replayed = requests.get(callback, allow_redirects=False)
    assert query(replayed.headers["Location"])["error_code"] == "bad_oauth_state"

    callback = browse(authorize_url(world), stop_at=f"{base}/auth/v1/callback")
    later = tokens.now() + 601
    monkeypatch.setattr(tokens, "now", lambda: later)
    expired = requests.get(callback, allow_redirects=False).headers["Location"]
    assert (
        query(expired)["error_code"] == "bad_oauth_state" and "expired" in query(expired)["error_description"]
    )
    monkeypatch.undo()

    denied = browse(authorize_url(world), deny=True)
    assert denied.startswith(APP) and query(denied)["error"] == "access_denied"
    assert "access_token" not in fragment(denied)


def provider_id_token(world, client_id, nonce):
    """An ID token the provider itself issues to a phone app (the code flow, run by the app)."""
    issuer = world["issuer"]
    url = (
        f"{issuer}/auth?client_id={client_id}&response_type=code&scope=openid%20email"
        f"&redirect_uri={APP}&nonce={nonce}"
    )
    code = query(browse(url))["code"]
    grant = {"grant_type": "authorization_code", "code": code, "redirect_uri": APP}
    token = requests.post(f"{issuer}/token", data=grant, auth=(client_id, SECRET))
    assert token.status_code == 200, token.text
    return token.json()["id_token"]


def id_token_grant(world, anon_key, id_token, nonce=None, provider="keycloak"):
    body = {"provider": provider, "id_token": id_token, **({"nonce": nonce} if nonce else {})}
    return requests.post(
        f"{world['base']}/auth/v1/token?grant_type=id_token", headers=headers(anon_key), json=body
    )


def test_the_id_token_grant_and_its_attacks(world, anon_key, provider_key):
    raw = secrets.token_urlsafe(16)
    hashed = hashlib.sha256(raw.encode()).hexdigest()
    genuine = provider_id_token(world, "phone-app", hashed)
    session = id_token_grant(world, anon_key, genuine, raw)
    assert session.status_code == 200, session.text
    assert session.json()["user"]["app_metadata"]["provider"] == "keycloak"

    now = int(time.time())
    claims = {"iss": world["issuer"], "aud": "phone-app", "sub": "alice", "email": "alice@example.com",
              "email_verified": True, "iat": now, "exp": now + 600, "nonce": hashed}  # fmt: skip
    other_key = RSAKey.generate_key(2048, parameters={"kid": "provider-key"})
    header = {"alg": "RS256", "kid": "provider-key"}
    unsigned = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    attacks = {
        "another audience": (provider_id_token(world, "another-app", hashed), raw),
        "another key": (jwt.encode(header, claims, other_key), raw),
        "alg none": (f"{unsigned}.{body}.", raw),
        "expired": (jwt.encode(header, {**claims, "exp": now - 120}, provider_key), raw),
        "wrong nonce": (genuine, "not-the-nonce"),
        "no nonce": (genuine, None),
        "another issuer": (jwt.encode(header, {**claims, "iss": "http://evil.example"}, provider_key), raw),
        "not a jwt": ("garbage", raw),
    }
    for name, (token, nonce) in attacks.items():
        refused = id_token_grant(world, anon_key, token, nonce)
        assert refused.status_code == 400, (name, refused.text)
        assert refused.json()["error_code"] in ("bad_oauth_callback", "validation_failed"), name
    assert id_token_grant(world, anon_key, genuine, raw, provider="github").status_code == 400
    # The same key-signed token with every check passing is accepted: the attacks failed on their flaw.
    assert id_token_grant(world, anon_key, jwt.encode(header, claims, provider_key), raw).status_code == 200
