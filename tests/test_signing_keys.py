"""Asymmetric signing keys (JWT_SIGNING_KEYS): ES256 and RS256 access tokens with a kid, the JWKS,
HS256 beside them, rotation, and the forgeries a verifier must refuse, each beside a genuine token
that passes. On both databases: sessions are stored."""

import base64
import hashlib
import hmac
import json

import jwt
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization

from auth import identity, signing_keys, tokens
from support import (
    SECRET,
    Api,
    SupabaseJs,
    assert_auth_error,
    assert_rest_error,
    assert_storage_error,
    gotrue_client,
    serve_app,
)
from variables import ConfigError

EC_A = signing_keys.generate("ES256", kid="key-a")
EC_B = signing_keys.generate("ES256", kid="key-b")
RSA_C = signing_keys.generate("RS256", kid="key-c")
PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi", "k"}
# An HS256 key in GoTrue's form, as auth-js's own test server lists it beside an RSA key.
OCT = {"kty": "oct", "k": base64.urlsafe_b64encode(b"o" * 32).decode().rstrip("="), "kid": "key-h",
       "key_ops": ["sign", "verify"], "alg": "HS256"}  # fmt: skip
TABLES = """
[tables.notes]
select = "owner"
insert = "owner"
owner_column = "user_id"
"""


def standby(key):
    return {**key, "key_ops": ["verify"]}


@pytest.fixture
def make(make_app, database_url, tmp_path, anon_key):
    """A function: an Api on the shared test database configured with these signing keys."""
    with sa.create_engine(database_url).begin() as connection:
        connection.execute(sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER, body TEXT)"))
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)

    def build(*keys):
        settings = {"TABLES_CONFIG": str(config)}
        if keys:
            settings["JWT_SIGNING_KEYS"] = json.dumps(keys)
        return Api(make_app(**settings), anon_key)

    return build


def header(token):
    return jwt.get_unverified_header(token)


def accepted_everywhere(api, token):
    """The token is a signed-in user's on all three APIs."""
    assert api.get("/auth/v1/user", token=token).status_code == 200
    assert api.get("/rest/v1/notes", token=token).status_code == 200
    assert api.get("/storage/v1/bucket", token=token).status_code == 200
    return True


def refused_everywhere(api, token):
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "bad_jwt")
    assert_rest_error(api.get("/rest/v1/notes", token=token), 401)
    assert_storage_error(api.get("/storage/v1/bucket", token=token), 401, "InvalidJWT")
    return True


@pytest.mark.parametrize("key", [EC_A, RSA_C], ids=["ES256", "RS256"])
def test_tokens_are_signed_with_the_signing_key_and_verify_with_the_published_one(make, key):
    api = make(key)
    token = api.sign_up()["access_token"]
    assert header(token) == {"alg": key["alg"], "kid": key["kid"], "typ": "JWT"}
    published = api.client.get("/auth/v1/.well-known/jwks.json")  # no apikey
    assert published.status_code == 200
    assert published.headers["Cache-Control"] == "public, max-age=600"
    (jwk,) = published.json["keys"]
    claims = jwt.decode(
        token, jwt.PyJWK(jwk).key, algorithms=[key["alg"]], audience="authenticated", issuer="minibase"
    )
    assert claims["sub"] == "1" and claims["role"] == "authenticated"
    assert accepted_everywhere(api, token)
    with api.app.app_context():  # the one call other servers (Realtime) verify a bearer with
        who = identity.identify(token)
    assert (who.user_id, who.role, who.expires_at) == (1, "authenticated", claims["exp"])
    assert api.post("/rest/v1/notes", token=token, json={"id": 1, "body": "x"}).status_code == 201
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": api.sign_in().json["refresh_token"]}
    )
    assert header(refreshed.json["access_token"])["kid"] == key["kid"]


def test_the_jwks_holds_public_members_only(make):
    api = make(EC_A, standby(RSA_C))
    keys = api.client.get("/auth/v1/.well-known/jwks.json").json["keys"]
    assert [key["kid"] for key in keys] == ["key-a", "key-c"]
    for key in keys:
        assert not PRIVATE_MEMBERS & set(key), key
        assert key["use"] == "sig" and key["key_ops"] == ["verify"]
    assert {"x", "y", "crv"} <= set(keys[0]) and {"n", "e"} <= set(keys[1])
    assert keys[0]["x"] == EC_A["x"] and keys[1]["n"] == RSA_C["n"]
    text = json.dumps(keys)
    assert EC_A["d"] not in text and RSA_C["d"] not in text and SECRET not in text


def test_without_signing_keys_the_jwks_is_empty_and_tokens_stay_hs256(make):
    api = make()
    assert api.client.get("/auth/v1/.well-known/jwks.json").json == {"keys": []}
    assert header(api.sign_up()["access_token"]) == {"alg": "HS256", "typ": "JWT"}


def test_hs256_tokens_and_keys_keep_working_beside_the_signing_keys(make):
    before = make()
    legacy = before.sign_up()["access_token"]
    after = make(EC_A)
    assert accepted_everywhere(after, legacy)  # issued before the switch, by the same secret
    assert after.get("/auth/v1/settings").status_code == 200  # the HS256 anon key
    renewed = after.sign_in().json["access_token"]
    assert header(renewed)["kid"] == "key-a" and accepted_everywhere(after, renewed)


def test_a_standby_key_verifies_before_it_signs_and_a_retired_key_stops_verifying(make):
    first = make(EC_A, standby(EC_B))
    by_a = first.sign_up()["access_token"]
    second = make(standby(EC_A), EC_B)
    by_b = second.sign_in().json["access_token"]
    assert header(by_a)["kid"] == "key-a" and header(by_b)["kid"] == "key-b"
    assert accepted_everywhere(first, by_b)  # an instance not yet rotated trusts the new key
    assert accepted_everywhere(second, by_a)  # nobody is signed out by the rotation
    retired = make(EC_B)
    assert refused_everywhere(retired, by_a) and accepted_everywhere(retired, by_b)


# --- forgeries, each beside the genuine token


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hmac_token(head, claims, key):
    signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def public_pem(jwk):
    key = signing_keys.load([jwk], SECRET).verifying[jwk["kid"]].public_key
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def forge(kind, genuine):
    claims = jwt.decode(genuine, options={"verify_signature": False})
    if kind == "hs256_public_key_as_secret":
        return hmac_token({"alg": "HS256", "typ": "JWT", "kid": "key-a"}, claims, public_pem(EC_A))
    if kind == "hs256_public_key_as_secret_no_kid":
        return hmac_token({"alg": "HS256", "typ": "JWT"}, claims, public_pem(EC_A))
    if kind == "hs256_jwk_as_secret":
        published = {k: v for k, v in EC_A.items() if k not in PRIVATE_MEMBERS}
        return hmac_token({"alg": "HS256", "kid": "key-a"}, claims, json.dumps(published).encode())
    if kind == "alg_none":
        head = b64url(json.dumps({"alg": "none", "kid": "key-a"}).encode())
        return f"{head}.{b64url(json.dumps(claims).encode())}."
    if kind == "unknown_kid":
        stranger = signing_keys.load([{**EC_B, "kid": "key-x"}], SECRET).signing
        return jwt.encode(claims, stranger.private_key, algorithm="ES256", headers={"kid": "key-x"})
    if kind == "known_kid_other_key":
        stranger = signing_keys.load([EC_B], SECRET).signing
        return jwt.encode(claims, stranger.private_key, algorithm="ES256", headers={"kid": "key-a"})
    if kind == "rs256_header_on_ec_key":
        rsa = signing_keys.load([RSA_C], SECRET).signing
        return jwt.encode(claims, rsa.private_key, algorithm="RS256", headers={"kid": "key-a"})
    if kind == "expired":
        real = signing_keys.load([EC_A], SECRET).signing
        stale = {**claims, "iat": claims["iat"] - 7200, "exp": claims["iat"] - 3600}
        return jwt.encode(stale, real.private_key, algorithm="ES256", headers={"kid": "key-a"})
    raise AssertionError(kind)


FORGERIES = [
    "hs256_public_key_as_secret",
    "hs256_public_key_as_secret_no_kid",
    "hs256_jwk_as_secret",
    "alg_none",
    "unknown_kid",
    "known_kid_other_key",
    "rs256_header_on_ec_key",
    "expired",
]


def test_forged_tokens_are_refused_on_every_api_beside_the_genuine_one(make):
    api = make(EC_A, standby(RSA_C))
    genuine = api.sign_up()["access_token"]
    for kind in FORGERIES:
        assert accepted_everywhere(api, genuine), kind
        forged = forge(kind, genuine)
        assert refused_everywhere(api, forged), kind
        with pytest.raises(tokens.TokenError):
            tokens.decode_access_token(forged, api.app.config["JWT_KEYS"])


def test_an_oct_key_signs_hs256_with_its_kid_while_rsa_keys_only_verify(make):
    """auth-js's docker set-up on :9998: the oct key signs, the RSA key verifies; the JWKS publishes
    the RSA key alone, and the other way round the RSA key signs while the oct key verifies."""
    api = make(OCT, standby(RSA_C))
    token = api.sign_up()["access_token"]
    assert header(token) == {"alg": "HS256", "kid": "key-h", "typ": "JWT"}
    secret = base64.urlsafe_b64decode(OCT["k"] + "=")
    assert jwt.decode(token, secret, algorithms=["HS256"], audience="authenticated")["sub"] == "1"
    assert accepted_everywhere(api, token)
    published = api.client.get("/auth/v1/.well-known/jwks.json").json["keys"]
    assert [key["kid"] for key in published] == ["key-c"] and OCT["k"] not in json.dumps(published)
    # Forged: the oct key's kid over JWT_SECRET, and an RS256 token "signed" with the oct secret.
    claims = jwt.decode(token, options={"verify_signature": False})
    assert refused_everywhere(api, jwt.encode(claims, SECRET, algorithm="HS256", headers={"kid": "key-h"}))
    other = jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "key-c"})
    assert refused_everywhere(api, other)
    swapped = make({**OCT, "key_ops": ["verify"]}, RSA_C)
    assert header(swapped.sign_in().json["access_token"])["kid"] == "key-c"
    assert accepted_everywhere(swapped, token)  # the oct key's tokens keep verifying


def cli_key(role, key=RSA_C, **changes):
    """An API key as the Supabase CLI makes one from its signing key (auth-js's test/lib/clients.ts):
    RS256 with the key's kid, iss supabase-demo."""
    signer = signing_keys.load([key], SECRET).signing
    claims = {"iss": "supabase-demo", "role": role, "iat": 1768925145, "exp": 1983812996, **changes}
    head = {"kid": key["kid"]}
    return jwt.encode(claims, signer.private_key, algorithm=signer.algorithm, headers=head)


def test_api_keys_signed_by_a_listed_key_are_keys_and_forgeries_of_them_are_not(make):
    """The Supabase CLI signs its anon and service_role keys with its RS256 signing key; such a key
    is verified by the listed key its kid names, with that key's one algorithm, as tokens are."""
    api = make(EC_A, standby(RSA_C))
    anon, service = cli_key("anon"), cli_key("service_role")
    assert Api(api.app, anon).get("/auth/v1/settings").status_code == 200
    assert Api(api.app, service).get("/rest/v1/notes").status_code == 200
    assert Api(api.app, service).get("/storage/v1/bucket").status_code == 200
    assert Api(api.app, anon).get("/auth/v1/admin/users", token=anon).status_code == 403
    assert Api(api.app, service).get("/auth/v1/admin/users", token=service).status_code == 200
    assert identity.api_key_role(service, api.app.config["JWT_KEYS"]) == "service_role"
    claims = jwt.decode(anon, options={"verify_signature": False})
    public = public_pem(RSA_C)
    forged = {
        "unknown kid": cli_key("anon", {**RSA_C, "kid": "key-x"}),
        "known kid, other key": jwt.encode(
            claims, signing_keys.load([EC_B], SECRET).signing.private_key, "ES256", headers={"kid": "key-c"}
        ),
        "JWT_SECRET under the key's kid": jwt.encode(claims, SECRET, "HS256", headers={"kid": "key-c"}),
        "public key as an HS256 secret": hmac_token({"alg": "HS256", "kid": "key-c"}, claims, public),
        "alg none": f"{b64url(json.dumps({'alg': 'none', 'kid': 'key-c'}).encode())}."
        f"{b64url(json.dumps(claims).encode())}.",
        "expired": cli_key("anon", exp=1700000000),
        "a user's claims": cli_key("anon", sub="1", aud="authenticated"),
        "another role": cli_key("supabase_admin"),
    }
    for kind, key in forged.items():
        response = Api(api.app, key).get("/auth/v1/settings")
        assert response.status_code == 401 and response.json["message"] == "Invalid API key", kind
        assert Api(api.app, anon).get("/auth/v1/settings").status_code == 200, kind
    retired = make(EC_A)
    refused = Api(retired.app, anon).get("/auth/v1/settings")
    assert refused.status_code == 401 and refused.json["message"] == "Invalid API key"


# --- the setting, checked at start


@pytest.mark.parametrize(
    "configured, message",
    [
        ("[{not json", "must be a JSON array of private JWKs"),
        ("{}", "must be a JSON array"),
        ("[]", "with at least one key"),
        (json.dumps([standby(EC_A)]), "has no signing key"),
        (json.dumps([EC_A, EC_B]), "several signing keys"),
        (json.dumps([EC_A, {**EC_B, "kid": "key-a"}]), "names more than one key"),
        (json.dumps([{k: v for k, v in EC_A.items() if k != "d"}]), "is a public key"),
        (json.dumps([{k: v for k, v in EC_A.items() if k != "kid"}]), "has no kid"),
        (json.dumps([{"kty": "oct", "k": "c2VjcmV0", "kid": "h", "key_ops": ["sign"]}]), "at least 32 bytes"),
        (json.dumps([{"kty": "oct", "kid": "h", "key_ops": ["sign"]}]), "oct key without a base64url k"),
        (json.dumps([{**OCT, "alg": "HS512"}]), "signs with HS256"),
        (json.dumps([{**EC_A, "kty": "OKP"}]), "only EC (P-256, ES256), RSA (RS256) and oct (HS256)"),
        (json.dumps([{**EC_A, "crv": "P-384"}]), "only P-256"),
        (json.dumps([{**EC_A, "alg": "RS256"}]), "signs with ES256"),
        (json.dumps([{**EC_A, "x": EC_B["x"], "y": EC_B["y"]}]), "not a valid EC private key"),
        (json.dumps(["key"]), "is not a JSON object"),
    ],
)
def test_a_signing_key_setting_that_cannot_work_stops_the_start(configured, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        signing_keys.load(configured, SECRET)


def test_the_app_does_not_start_with_a_bad_signing_key(make_app):
    with pytest.raises(ConfigError, match="JWT_SIGNING_KEYS has no signing key"):
        make_app(JWT_SIGNING_KEYS=json.dumps([standby(EC_A)]))


@pytest.mark.parametrize("algorithm", ["ES256", "RS256"])
def test_the_cli_generates_a_key_that_signs(make_app, algorithm):
    runner = make_app().test_cli_runner()
    printed = runner.invoke(args=["keys", "generate-signing-key", "--alg", algorithm])
    assert printed.exit_code == 0, printed.output
    key = json.loads(printed.output)
    assert key["alg"] == algorithm and key["key_ops"] == ["sign", "verify"] and "d" in key
    assert signing_keys.load([key], SECRET).signing.kid == key["kid"]
    standby_key = json.loads(runner.invoke(args=["keys", "generate-signing-key", "--standby"]).output)
    assert standby_key["key_ops"] == ["verify"]
    assert "anon key:" in runner.invoke(args=["keys"]).output


# --- the SDKs verify tokens locally after fetching the JWKS once


class Counted:
    """WSGI middleware: the paths of the requests the app receives."""

    def __init__(self, app):
        self.app, self.paths = app, []

    def __call__(self, environ, start_response):
        self.paths.append(environ["PATH_INFO"])
        return self.app(environ, start_response)


@pytest.fixture
def served(make):
    api = make(EC_A, standby(RSA_C))
    counted = Counted(api.app.wsgi_app)
    api.app.wsgi_app = counted
    base, stop = serve_app(api.app)
    yield base, counted, api
    stop()


def test_supabase_js_get_claims_verifies_locally_after_fetching_the_jwks(served, anon_key, node_modules):
    base, counted, api = served
    with SupabaseJs(base, anon_key) as js:
        assert js("ann", "auth.signUp", {"email": "js@example.com", "password": "secret-pw"})["error"] is None
        counted.paths.clear()
        first = js("ann", "auth.getClaims")
        assert first["error"] is None and first["data"]["claims"]["email"] == "js@example.com"
        assert first["data"]["header"]["kid"] == "key-a"
        assert counted.paths == ["/auth/v1/.well-known/jwks.json"]
        assert js("ann", "auth.getClaims")["data"]["claims"]["sub"] == "1"
        token = api.sign_in("js@example.com").json["access_token"]
        counted.paths.clear()
        assert js("ann", "auth.getClaims", token)["data"]["claims"]["session_id"]
        forged = js("ann", "auth.getClaims", forge("known_kid_other_key", token))
        assert forged["data"] is None and forged["error"]["message"] == "Invalid JWT signature"
        assert counted.paths == []  # no round trip: not for the second call, not for a forgery


def test_supabase_py_get_claims_verifies_locally_after_fetching_the_jwks(served, anon_key):
    import httpx
    from supabase_auth.errors import AuthInvalidJwtError

    base, counted, api = served
    with httpx.Client() as http:
        client = gotrue_client(base, anon_key, http)
        client.sign_up({"email": "py@example.com", "password": "secret-pw"})
        counted.paths.clear()
        assert client.get_claims()["claims"]["email"] == "py@example.com"
        assert client.get_claims()["headers"]["kid"] == "key-a"
        token = client.get_session().access_token
        with pytest.raises(AuthInvalidJwtError):
            client.get_claims(forge("known_kid_other_key", token))
        assert counted.paths == ["/auth/v1/.well-known/jwks.json"]


def test_the_dashboard_signs_an_administrator_in_under_signing_keys(make, service_key):
    from dashboard import sessions as dashboard_sessions

    api = make(EC_A)
    api.sign_up()
    admin = Api(api.app, service_key)
    assert admin.put("/auth/v1/admin/users/1", json={"app_metadata": {"role": "admin"}}).status_code == 200
    with api.app.app_context():
        cookie, needs_code = dashboard_sessions.sign_in("ann@example.com", "secret-pw", "127.0.0.1")
        assert cookie and not needs_code
        assert dashboard_sessions.current(cookie).email == "ann@example.com"
