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
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from auth import providers, tokens
from support import SupabaseJs, free_port, gotrue_client, listening_socket, serve_app

JS = __import__("pathlib").Path(__file__).resolve().parent / "js"
APP = "http://app.example/welcome"  # the app's page: never fetched, only read off a Location
ACCOUNTS = {
    "alice": {"email": "alice@example.com", "email_verified": True, "name": "Alice", "github_id": 101},
    "mallory": {"email": "victim@example.com", "email_verified": False, "name": "Mallory", "github_id": 102},
}
SECRET = "client-secret-" + "s" * 30


@pytest.fixture(scope="module")
def provider_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_jwk(key, kid="provider-key"):
    return {**jwt.algorithms.RSAAlgorithm.to_jwk(key, as_dict=True), "kid": kid, "use": "sig", "alg": "RS256"}


def signed(claims, key):
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "provider-key"})


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
        "JWKS": json.dumps({"keys": [private_jwk(key)]}),
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
def make_world(make_app, node_modules, provider_key):
    """make_world(**settings): minibase over waitress with the provider as `keycloak` (by discovery)
    and as `github`; `google=True` adds it as `google` too (the Google-shaped ID tokens of a phone)."""
    started, stops = [], []

    def make(google=False, **overrides):
        # An earlier test's provider may have had one of these ports: forget what it published.
        providers._discovered.clear()
        providers._keys.clear()
        # minibase's port is held from here: the providers' own free ports can never be it.
        listener = listening_socket()
        port = listener.getsockname()[1]
        callback = f"http://127.0.0.1:{port}/auth/v1/callback"
        issuer, oidc = start_provider(node_modules, provider_key, callback)
        github_url, github = start_provider(node_modules, provider_key, callback, github=True)
        started.extend((oidc, github))
        settings = {"EXTERNAL_KEYCLOAK_ENABLED": True, "EXTERNAL_KEYCLOAK_CLIENT_ID": "minibase,phone-app",
                    "EXTERNAL_KEYCLOAK_SECRET": SECRET, "EXTERNAL_KEYCLOAK_URL": issuer,
                    "EXTERNAL_GITHUB_ENABLED": True, "EXTERNAL_GITHUB_CLIENT_ID": "minibase",
                    "EXTERNAL_GITHUB_SECRET": SECRET, "EXTERNAL_GITHUB_URL": github_url,
                    "API_EXTERNAL_URL": f"http://127.0.0.1:{port}", "SITE_URL": "http://app.example",
                    "REDIRECT_ALLOW_LIST": "http://app.example/**",
                    "SECURITY_MANUAL_LINKING_ENABLED": True}  # fmt: skip
        if google:
            settings.update(EXTERNAL_GOOGLE_ENABLED=True, EXTERNAL_GOOGLE_CLIENT_ID="minibase,phone-app",
                            EXTERNAL_GOOGLE_SECRET=SECRET, EXTERNAL_GOOGLE_URL=issuer)  # fmt: skip
        try:
            app = make_app(**{**settings, **overrides})
        except BaseException:
            listener.close()
            raise
        base, stop = serve_app(app, listener=listener)
        stops.append(stop)
        return {"base": base, "issuer": issuer, "app": app, "providers": {"keycloak": oidc, "github": github}}

    yield make
    for stop in stops:
        stop()
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()


@pytest.fixture
def world(make_world):
    return make_world()


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


def test_an_anonymous_user_linking_a_provider_takes_on_its_verified_address(make_world, anon_key):
    """GoTrue's conversion by linkIdentity: the id stays, the verified address replaces the
    placeholder; mallory's unverified address converts nobody."""
    world = make_world(ANONYMOUS_USERS_ENABLED=True)
    visits = [requests.post(f"{world['base']}/auth/v1/signup", json={}, headers=headers(anon_key)).json()
              for _ in range(2)]  # fmt: skip

    def link(session, login):
        path = "/auth/v1/user/identities/authorize?provider=keycloak&skip_http_redirect=true"
        url = requests.get(world["base"] + path, headers=headers(anon_key, session["access_token"]))
        return browse(url.json()["url"], login=login)

    refused = link(visits[1], "mallory")
    assert query(refused)["error_code"] == "provider_email_needs_verification"
    assert user_of(world, anon_key, visits[1])["is_anonymous"] is True
    user = user_of(world, anon_key, fragment(link(visits[0], "alice")))
    assert (user["id"], user["is_anonymous"], user["email"]) == (
        visits[0]["user"]["id"],
        False,
        "alice@example.com",
    )
    assert user["app_metadata"]["providers"] == ["keycloak"]


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


@pytest.mark.parametrize(
    "asked",
    [
        "http://1249763210%3F.app.example/x",
        "http://[2001:db8::1]?.app.example/x",
        "http://evil\\.app.example/x",
    ],
)
def test_a_hostile_redirect_through_authorize_and_callback_lands_on_the_site(make_world, asked):
    """With `http://*.app.example/**` allowed, a spelling of another host that a raw-string glob
    took for a subdomain gets the session at SITE_URL, never at that host."""
    world = make_world(REDIRECT_ALLOW_LIST="http://*.app.example/**")
    start = f"{world['base']}/auth/v1/authorize?{urlencode({'provider': 'keycloak', 'redirect_to': asked})}"
    landed = browse(start, stop_at="http://1249763210")
    assert landed.startswith("http://app.example#") and "access_token" in fragment(landed), landed
    # The control: a subdomain the pattern admits keeps its session.
    own = "http://shop.app.example/welcome"
    landed = browse(
        f"{world['base']}/auth/v1/authorize?{urlencode({'provider': 'keycloak', 'redirect_to': own})}",
        stop_at=own,
    )
    assert landed.startswith(f"{own}#") and "access_token" in fragment(landed), landed


def test_forged_replayed_expired_state_and_denied_consent(world, monkeypatch):
    base = world["base"]
    claims = {"iss": "minibase", "typ": "oauth_state", "flow": "x", "iat": 1, "exp": 2**40}
    forged = jwt.encode(claims, "not-our-secret-" + "k" * 40, algorithm="HS256")
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


def provider_id_token(world, client_id, nonce, login="alice"):
    """An ID token the provider itself issues to a phone app (the code flow, run by the app)."""
    issuer = world["issuer"]
    url = (
        f"{issuer}/auth?client_id={client_id}&response_type=code&scope=openid%20email"
        f"&redirect_uri={APP}&nonce={nonce}"
    )
    code = query(browse(url, login=login))["code"]
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
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    unsigned = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    attacks = {
        "another audience": (provider_id_token(world, "another-app", hashed), raw),
        "another key": (signed(claims, other_key), raw),
        "alg none": (f"{unsigned}.{body}.", raw),
        "expired": (signed({**claims, "exp": now - 120}, provider_key), raw),
        "wrong nonce": (genuine, "not-the-nonce"),
        "no nonce": (genuine, None),
        "another issuer": (signed({**claims, "iss": "http://evil.example"}, provider_key), raw),
        "not a jwt": ("garbage", raw),
    }
    for name, (token, nonce) in attacks.items():
        refused = id_token_grant(world, anon_key, token, nonce)
        assert refused.status_code == 400, (name, refused.text)
        assert refused.json()["error_code"] in ("bad_oauth_callback", "validation_failed"), name
    assert id_token_grant(world, anon_key, genuine, raw, provider="github").status_code == 400
    # The same key-signed token with every check passing is accepted: the attacks failed on their flaw.
    assert id_token_grant(world, anon_key, signed(claims, provider_key), raw).status_code == 200


def nonce_pair():
    """(the nonce a phone app keeps, the SHA-256 of it the provider puts in the ID token)."""
    raw = secrets.token_urlsafe(16)
    return raw, hashlib.sha256(raw.encode()).hexdigest()


def assert_auth_body(response, status, error_code):
    """assert_auth_error for a response of `requests` (a real HTTP client)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "error_code", "msg", "message"} and body["error_code"] == error_code, body
    return body


def test_an_id_token_with_an_unverified_address_takes_over_no_account(world, anon_key):
    victim = sign_up(world, anon_key, "victim@example.com")
    raw, hashed = nonce_pair()
    refused = id_token_grant(world, anon_key, provider_id_token(world, "phone-app", hashed, "mallory"), raw)
    assert_auth_body(refused, 422, "provider_email_needs_verification")
    login = requests.post(f"{world['base']}/auth/v1/token?grant_type=password", headers=headers(anon_key),
                          json={"email": "victim@example.com", "password": "secret-pw"}).json()  # fmt: skip
    assert login["user"]["id"] == victim["user"]["id"]
    assert [i["provider"] for i in user_of(world, anon_key, login)["identities"]] == ["email"]


def test_with_sign_up_disabled_a_provider_signs_in_existing_users_only(make_world, anon_key, service_key):
    world = make_world(DISABLE_SIGNUP=True)
    landed = browse(authorize_url(world))
    assert landed.startswith(APP) and "access_token" not in fragment(landed) and "code" not in query(landed)
    assert query(landed)["error"] == "access_denied" and query(landed)["error_code"] == "signup_disabled"
    raw, hashed = nonce_pair()
    token = provider_id_token(world, "phone-app", hashed)
    assert_auth_body(id_token_grant(world, anon_key, token, raw), 422, "signup_disabled")
    admin = {"apikey": service_key, "Authorization": f"Bearer {service_key}"}
    assert requests.get(f"{world['base']}/auth/v1/admin/users", headers=admin).json()["users"] == []
    # An account the administrator made is found by its verified address and linked.
    alice = {"email": "alice@example.com", "password": "secret-pw", "email_confirm": True}
    made = requests.post(f"{world['base']}/auth/v1/admin/users", headers=admin, json=alice)
    assert made.status_code == 200, made.text
    session = fragment(browse(authorize_url(world)))
    user = user_of(world, anon_key, session)
    assert user["id"] == made.json()["id"] and user["app_metadata"]["providers"] == ["email", "keycloak"]
    assert id_token_grant(world, anon_key, token, raw).json()["user"]["id"] == user["id"]


def test_a_provider_that_is_down_is_an_error_redirect_or_a_503_never_a_500(make_world, anon_key, request):
    import socket

    # A port held but not listening refuses every connection, and no other server can take it; the
    # issuer's path is new, so that no discovery document cached by an earlier test answers for it.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    request.addfinalizer(held.close)
    dead = f"http://127.0.0.1:{held.getsockname()[1]}/down-{secrets.token_hex(4)}"
    world = make_world(EXTERNAL_GOOGLE_ENABLED=True, EXTERNAL_GOOGLE_CLIENT_ID="phone-app",
                       EXTERNAL_GOOGLE_SECRET=SECRET, EXTERNAL_GOOGLE_URL=dead,
                       EXTERNAL_GITHUB_SECRET="not-the-client-secret")  # fmt: skip
    base = world["base"]
    # Its discovery cannot be fetched: the browser goes back to the app with the error.
    landed = requests.get(authorize_url(world, provider="google"), allow_redirects=False)
    assert landed.status_code == 302 and landed.headers["Location"].startswith(APP)
    assert query(landed.headers["Location"])["error"] == "temporarily_unavailable"
    assert query(landed.headers["Location"])["error_code"] == "unexpected_failure"
    # A JSON client gets a 503 in the auth API's body: the SDKs retry those.
    assert_auth_body(id_token_grant(world, anon_key, "a.b.c", provider="google"), 503, "unexpected_failure")
    session = sign_up(world, anon_key, "ann@example.com")
    link = requests.get(f"{base}/auth/v1/user/identities/authorize?provider=google&skip_http_redirect=true",
                        headers=headers(anon_key, session["access_token"]))  # fmt: skip
    assert_auth_body(link, 503, "unexpected_failure")
    with SupabaseJs(base, anon_key) as js:
        answer = js("phone", "auth.signInWithIdToken", {"provider": "google", "token": "a.b.c"})
    assert answer["error"]["name"] == "AuthRetryableFetchError" and answer["error"]["status"] == 503

    # The provider refuses our client's secret at its token endpoint: an error redirect too.
    landed = browse(authorize_url(world, provider="github"))
    assert query(landed)["error_code"] == "bad_oauth_callback" and "access_token" not in fragment(landed)
    assert query(landed)["error"] == "invalid_request"

    # The provider goes down between the sign-in page and the callback.
    callback = browse(authorize_url(world), stop_at=f"{base}/auth/v1/callback")
    world["providers"]["keycloak"].terminate()
    world["providers"]["keycloak"].wait(timeout=10)
    landed = requests.get(callback, allow_redirects=False)
    assert landed.status_code == 302 and landed.headers["Location"].startswith(APP)
    assert query(landed.headers["Location"])["error"] == "temporarily_unavailable"
    assert "access_token" not in fragment(landed.headers["Location"])


# --- the official clients, as apps call them


def test_supabase_js_signs_in_with_a_provider_under_pkce_links_and_unlinks(world, anon_key):
    options = {"redirectTo": APP, "skipBrowserRedirect": True}
    with SupabaseJs(world["base"], anon_key) as js:
        started = js("app", "auth.signInWithOAuth", {"provider": "keycloak", "options": options})
        url = started["data"]["url"]
        assert started["error"] is None and "code_challenge=" in url and "code_challenge_method=s256" in url
        landed = browse(url)
        assert landed.startswith(APP + "?code=") and "access_token" not in landed
        session = js("app", "auth.exchangeCodeForSession", query(landed)["code"])
        assert session["error"] is None, session
        user = session["data"]["user"]
        assert user["email"] == "alice@example.com" and user["app_metadata"]["provider"] == "keycloak"
        assert [i["provider"] for i in user["identities"]] == ["keycloak"]

        link = js("app", "auth.linkIdentity", {"provider": "github", "options": options})
        assert link["error"] is None and link["data"]["url"].startswith("http://127.0.0.1:")
        linked = js("app", "auth.exchangeCodeForSession", query(browse(link["data"]["url"]))["code"])
        assert linked["error"] is None and linked["data"]["user"]["id"] == user["id"]
        identities = js("app", "auth.getUserIdentities")["data"]["identities"]
        assert sorted(i["provider"] for i in identities) == ["github", "keycloak"]

        # Another user cannot link the GitHub account: it is Alice's.
        js("bob", "auth.signUp", {"email": "bob@example.com", "password": "secret-pw"})
        taken = browse(
            js("bob", "auth.linkIdentity", {"provider": "github", "options": options})["data"]["url"]
        )
        assert query(taken)["error_code"] == "identity_already_exists" and "code" not in query(taken)
        bobs = js("bob", "auth.getUserIdentities")["data"]["identities"]
        assert [i["provider"] for i in bobs] == ["email"]

        github = next(i for i in identities if i["provider"] == "github")
        keycloak = next(i for i in identities if i["provider"] == "keycloak")
        assert js("bob", "auth.unlinkIdentity", github)["error"]["code"] == "identity_not_found"
        assert js("app", "auth.unlinkIdentity", github)["error"] is None
        last = js("app", "auth.unlinkIdentity", keycloak)
        assert last["error"]["code"] == "single_identity_not_deletable"
        remaining = js("app", "auth.getUserIdentities")["data"]["identities"]
        assert [i["provider"] for i in remaining] == ["keycloak"]


def test_supabase_js_signs_in_and_links_with_id_tokens(make_world, anon_key):
    world = make_world(google=True)
    with SupabaseJs(world["base"], anon_key) as js:
        raw, hashed = nonce_pair()
        token = provider_id_token(world, "phone-app", hashed)
        signed = js("phone", "auth.signInWithIdToken", {"provider": "google", "token": token, "nonce": raw})
        assert signed["error"] is None, signed
        alice = signed["data"]["user"]
        assert alice["email"] == "alice@example.com" and alice["app_metadata"]["provider"] == "google"
        assert js("phone", "auth.getUser")["data"]["user"]["id"] == alice["id"]
        wrong = js("other", "auth.signInWithIdToken", {"provider": "google", "token": token, "nonce": "x"})
        assert wrong["error"]["code"] == "bad_oauth_callback" and wrong["data"]["session"] is None

        # Bob, signed in with his password, links the provider account by its ID token.
        bob = js("bob", "auth.signUp", {"email": "bob@example.com", "password": "secret-pw"})["data"]["user"]
        raw, hashed = nonce_pair()
        token = provider_id_token(world, "phone-app", hashed)
        linked = js("bob", "auth.linkIdentity", {"provider": "keycloak", "token": token, "nonce": raw})
        assert linked["error"] is None, linked
        assert linked["data"]["user"]["id"] == bob["id"]
        assert linked["data"]["user"]["app_metadata"]["providers"] == ["email", "keycloak"]
        raw, hashed = nonce_pair()
        token = provider_id_token(world, "phone-app", hashed)
        again = js("tablet", "auth.signInWithIdToken", {"provider": "keycloak", "token": token, "nonce": raw})
        assert again["data"]["user"]["id"] == bob["id"]  # that identity now signs Bob in
    # Linking needs the user's own token: without one, or with the API key as one, it is refused.
    body = {"provider": "keycloak", "id_token": token, "nonce": raw, "link_identity": True}
    url = f"{world['base']}/auth/v1/token?grant_type=id_token"
    assert_auth_body(requests.post(url, headers=headers(anon_key), json=body), 401, "no_authorization")
    assert_auth_body(requests.post(url, headers=headers(anon_key, anon_key), json=body), 401, "bad_jwt")


def test_supabase_py_signs_in_with_a_provider_and_an_id_token(world, anon_key):
    pytest.importorskip("supabase_auth")
    import httpx
    from supabase_auth.errors import AuthApiError

    with httpx.Client() as http:
        client = gotrue_client(world["base"], anon_key, http, flow_type="pkce")
        started = client.sign_in_with_oauth({"provider": "keycloak", "options": {"redirect_to": APP}})
        assert "code_challenge=" in started.url
        session = client.exchange_code_for_session({"auth_code": query(browse(started.url))["code"]})
        assert session.user.email == "alice@example.com" and session.session.access_token
        assert [i.provider for i in session.user.identities] == ["keycloak"]

        raw, hashed = nonce_pair()
        token = provider_id_token(world, "phone-app", hashed)
        signed = client.sign_in_with_id_token({"provider": "keycloak", "token": token, "nonce": raw})
        assert signed.user.id == session.user.id and signed.session.access_token
        with pytest.raises(AuthApiError) as refused:
            client.sign_in_with_id_token({"provider": "keycloak", "token": token, "nonce": "not-it"})
        assert refused.value.code == "bad_oauth_callback"


def test_a_deleted_user_leaves_nothing_that_signs_in(world, anon_key, service_key):
    """Deleting a user deletes their identities and factors: the provider account then signs up
    afresh. A row deleted by the application that shares the users table does the same."""
    from sqlalchemy import func, select

    from extensions import db
    from models.auth import Factor, Identity

    first = fragment(browse(authorize_url(world)))
    user_id = user_of(world, anon_key, first)["id"]
    signed_in = headers(anon_key, first["access_token"])
    enrolled = requests.post(
        f"{world['base']}/auth/v1/factors", headers=signed_in, json={"factor_type": "totp"}
    )
    assert enrolled.status_code == 200, enrolled.text
    admin = {"apikey": service_key, "Authorization": f"Bearer {service_key}"}
    assert requests.delete(f"{world['base']}/auth/v1/admin/users/{user_id}", headers=admin).status_code == 200
    with world["app"].app_context():
        for model in (Identity, Factor):
            assert db.session.execute(select(func.count()).where(model.user_id == user_id)).scalar() == 0
    second = fragment(browse(authorize_url(world)))
    again = user_of(world, anon_key, second)
    # (SQLite may give the new user the same id: nothing of the old one's may come with it.)
    assert "factors" not in again and [i["provider"] for i in again["identities"]] == ["keycloak"]

    bob = sign_up(world, anon_key, "bob@example.com")["user"]["id"]  # so that no id is reused below
    with world["app"].app_context():  # the other application deletes the row itself
        from models import users_table

        users = users_table()
        db.session.execute(users.delete().where(users.c.user_id == again["id"]))
        db.session.commit()
    third = fragment(browse(authorize_url(world)))
    assert "access_token" in third and user_of(world, anon_key, third)["id"] not in (again["id"], bob)


@pytest.mark.parametrize("pkce", [False, True])
def test_a_banned_or_deactivated_user_is_turned_away_at_the_callback(world, anon_key, service_key, pkce):
    first = fragment(browse(authorize_url(world)))
    user_id = user_of(world, anon_key, first)["id"]
    admin = {"apikey": service_key, "Authorization": f"Bearer {service_key}"}
    path = f"{world['base']}/auth/v1/admin/users/{user_id}"
    assert requests.put(path, headers=admin, json={"ban_duration": "24h"}).status_code == 200
    _, challenge = pkce_pair()
    params = {"code_challenge": challenge, "code_challenge_method": "s256"} if pkce else {}
    banned = browse(authorize_url(world, **params))
    assert query(banned)["error"] == "access_denied" and query(banned)["error_code"] == "user_banned"
    assert "code" not in query(banned) and "access_token" not in fragment(banned)
    raw, hashed = nonce_pair()
    assert_auth_body(id_token_grant(world, anon_key, provider_id_token(world, "phone-app", hashed), raw),
                     400, "user_banned")  # fmt: skip
    requests.put(path, headers=admin, json={"ban_duration": "none"})
    with world["app"].app_context():  # the application that shares the users table deactivates them
        from extensions import db
        from models import users_table

        users = users_table()
        db.session.execute(users.update().where(users.c.user_id == user_id).values(active=0))
        db.session.commit()
    inactive = browse(authorize_url(world, **params))
    assert query(inactive)["error"] == "access_denied" and query(inactive)["error_code"] == "user_inactive"
    assert "code" not in query(inactive)


def test_racing_first_sign_ins_of_one_provider_account_all_get_in_as_one_user(world, anon_key):
    """A phone that retries (or two tabs) signs in with the same new account at once: one request
    creates the user, the others find it; none is refused or a 5xx."""
    from concurrent.futures import ThreadPoolExecutor

    raw, hashed = nonce_pair()
    token = provider_id_token(world, "phone-app", hashed)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: id_token_grant(world, anon_key, token, raw), range(8)))
    assert [answer.status_code for answer in answers] == [200] * 8, [answer.text for answer in answers]
    assert len({answer.json()["user"]["id"] for answer in answers}) == 1


def test_before_user_created_vetoes_a_providers_first_sign_in(make_world, anon_key):
    from hook_server import HOOK_SECRET, HookServer

    hook = HookServer()
    try:
        hook.json({"error": {"http_code": 403, "message": "No strangers"}})
        world = make_world(
            HOOK_BEFORE_USER_CREATED_ENABLED=True,
            HOOK_BEFORE_USER_CREATED_URI=hook.url,
            HOOK_BEFORE_USER_CREATED_SECRETS=HOOK_SECRET,
        )
        landed = browse(authorize_url(world))
        assert landed.startswith(APP) and "access_token" not in fragment(landed)
        assert fragment(landed)["error_description"] == "No strangers"
        raw, hashed = nonce_pair()
        refused = id_token_grant(world, anon_key, provider_id_token(world, "phone-app", hashed), raw)
        assert assert_auth_body(refused, 403, "unknown")["msg"] == "No strangers"
        seen = hook.calls[-1]
        assert seen["verified"] and seen["payload"]["user"]["app_metadata"]["provider"] == "keycloak"
        hook.answer = lambda payload: (204, None, b"")
        raw, hashed = nonce_pair()
        allowed = id_token_grant(world, anon_key, provider_id_token(world, "phone-app", hashed), raw)
        assert allowed.status_code == 200 and allowed.json()["access_token"]
    finally:
        hook.stop()
