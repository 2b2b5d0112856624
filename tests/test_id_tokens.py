"""A provider's ID tokens verified against the keys it publishes (auth/providers.py), served by a real
HTTP server on 127.0.0.1: which key verifies which token, the claims, the clock, a key published
later. tests/test_external.py runs the whole id_token grant against a real OpenID provider."""

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from auth import providers, tokens

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
OCT_SECRET = "a shared secret, published by mistake"
OCT_K = base64.urlsafe_b64encode(OCT_SECRET.encode()).rstrip(b"=").decode()


def public_jwk(algorithm, key, **fields):
    return {**json.loads(algorithm.to_jwk(key.public_key())), **fields}


RSA_JWK = public_jwk(jwt.algorithms.RSAAlgorithm, RSA_KEY, kid="rsa", use="sig")  # no alg: RS* and PS*
PINNED_JWK = public_jwk(jwt.algorithms.RSAAlgorithm, OTHER_RSA_KEY, kid="pinned", alg="RS256")
EC_JWK = public_jwk(jwt.algorithms.ECAlgorithm, EC_KEY, kid="ec")
ED_JWK = public_jwk(jwt.algorithms.OKPAlgorithm, ED_KEY, kid="ed")


PUBLISHED = {"keys": []}


@pytest.fixture(scope="module")
def provider_url():
    """A real HTTP server publishing a discovery document and PUBLISHED as its keys."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            base = f"http://127.0.0.1:{self.server.server_port}"
            found = {"/.well-known/openid-configuration": {"issuer": base, "jwks_uri": f"{base}/jwks"},
                     "/jwks": PUBLISHED}.get(self.path)  # fmt: skip
            body = json.dumps(found).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def provider(provider_url, monkeypatch):
    """(a Provider at provider_url, the keys it publishes, which the test may change), nothing of
    it fetched yet."""
    monkeypatch.setitem(
        PUBLISHED, "keys", [RSA_JWK, PINNED_JWK, EC_JWK, ED_JWK, {"kty": "oct", "k": OCT_K, "kid": "hs"}]
    )
    monkeypatch.setattr(providers, "_discovered", {})
    monkeypatch.setattr(providers, "_keys", {})
    chosen = providers.Provider("keycloak", providers.KINDS["keycloak"], provider_url, ("app", "web"), "", "")
    return chosen, PUBLISHED


def claims_of(chosen, **changed):
    now = tokens.now()
    claims = {"iss": chosen.url, "aud": "app", "sub": "alice", "iat": now, "exp": now + 600, "nonce": "n"}
    return {key: value for key, value in {**claims, **changed}.items() if value is not None}


def signed(claims, key=RSA_KEY, algorithm="RS256", kid="rsa"):
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid} if kid else None)


def forged_hs256(claims, secret, kid="rsa"):
    """A token HMAC'd with `secret` by hand: PyJWT refuses to sign with a public key as the secret."""
    part = lambda data: base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=")  # noqa: E731
    signing_input = part({"alg": "HS256", "kid": kid}) + b"." + part(claims)
    mac = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    return (signing_input + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")).decode()


ACCEPTED = {
    "RS256 by a key without alg": lambda c: signed(c),
    "PS256 by a key without alg": lambda c: signed(c, algorithm="PS256"),
    "RS256 by a key pinned to it": lambda c: signed(c, OTHER_RSA_KEY, kid="pinned"),
    "ES256": lambda c: signed(c, EC_KEY, "ES256", "ec"),
    "EdDSA": lambda c: signed(c, ED_KEY, "EdDSA", "ed"),
}


@pytest.mark.parametrize("make", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_token_signed_by_a_published_key_is_accepted(provider, make):
    chosen, _ = provider
    assert providers.verify_id_token(chosen, make(claims_of(chosen)), "n")["sub"] == "alice"


REFUSED = {
    "another key": lambda c, ch: signed(c, OTHER_RSA_KEY),
    "PS256 by a key pinned to RS256": lambda c, ch: signed(c, OTHER_RSA_KEY, "PS256", "pinned"),
    "ES256 by an RSA key's kid": lambda c, ch: signed(c, EC_KEY, "ES256", "rsa"),
    "HS256 with the public key as secret": lambda c, ch: forged_hs256(c, json.dumps(RSA_JWK)),
    "HS256 by a published oct key": lambda c, ch: forged_hs256(c, OCT_SECRET, "hs"),
    "alg none": lambda c, ch: jwt.encode(c, None, algorithm="none", headers={"kid": "rsa"}),
    "no kid among several keys": lambda c, ch: signed(c, kid=None),
    "an unknown kid": lambda c, ch: signed(c, kid="nobody"),
    "another audience": lambda c, ch: signed(claims_of(ch, aud="other")),
    "another issuer": lambda c, ch: signed(claims_of(ch, iss="http://evil.example")),
    "no sub": lambda c, ch: signed(claims_of(ch, sub=None)),
    "no exp": lambda c, ch: signed(claims_of(ch, exp=None)),
    "expired past the leeway": lambda c, ch: signed(claims_of(ch, exp=tokens.now() - 31)),
    "not valid yet": lambda c, ch: signed(claims_of(ch, nbf=tokens.now() + 60)),
    "issued in the future": lambda c, ch: signed(claims_of(ch, iat=tokens.now() + 60)),
    "exp not a number": lambda c, ch: signed(claims_of(ch, exp="later")),
    "another nonce": lambda c, ch: signed(claims_of(ch, nonce="other")),
    "no nonce": lambda c, ch: signed(claims_of(ch, nonce=None)),
    "not a JWT": lambda c, ch: "a.b.c",
    "not ASCII": lambda c, ch: "é" + signed(c),
}


@pytest.mark.parametrize("make", REFUSED.values(), ids=REFUSED.keys())
def test_a_token_with_a_flaw_is_refused(provider, make):
    chosen, _ = provider
    with pytest.raises(providers.BadIdToken):
        providers.verify_id_token(chosen, make(claims_of(chosen), chosen), "n")


def test_the_leeway_and_the_audiences(provider):
    """Within 30 s of our clock a token still counts, and its aud may list several, one of ours."""
    chosen, _ = provider
    now = tokens.now()
    token = signed(claims_of(chosen, aud=["other", "web"], exp=now - 20, iat=now + 20, nbf=now + 20))
    assert providers.verify_id_token(chosen, token, "n")["sub"] == "alice"


def test_one_published_key_verifies_a_token_that_names_none(provider):
    chosen, published = provider
    published["keys"] = [RSA_JWK]
    assert providers.verify_id_token(chosen, signed(claims_of(chosen), kid=None), "n")["sub"] == "alice"


def test_a_key_published_later_is_fetched_at_most_so_often(provider, monkeypatch):
    chosen, published = provider
    later = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = signed(claims_of(chosen), later, kid="later")
    assert providers.verify_id_token(chosen, signed(claims_of(chosen)), "n")  # the keys fetched
    published["keys"].append(public_jwk(jwt.algorithms.RSAAlgorithm, later, kid="later"))
    with pytest.raises(providers.BadIdToken):  # fetched again only JWKS_REFETCH_AFTER after
        providers.verify_id_token(chosen, token, "n")
    monkeypatch.setattr(providers, "JWKS_REFETCH_AFTER", 0)
    assert providers.verify_id_token(chosen, token, "n")["sub"] == "alice"


def test_a_key_set_with_no_usable_key_is_the_providers_failure(provider):
    chosen, published = provider
    published["keys"] = [{"kty": "oct", "k": "c2VjcmV0"}, {"kty": "RSA", "n": "not base64url!"}, "text"]
    with pytest.raises(providers.ProviderError):
        providers.verify_id_token(chosen, signed(claims_of(chosen)), "n")


def test_the_clock_is_minibases(provider, monkeypatch):
    """Expiry is judged by tokens.now, the clock the other tests move."""
    chosen, _ = provider
    token = signed(claims_of(chosen))
    monkeypatch.setattr(tokens, "now", lambda: int(time.time()) + 3600)
    with pytest.raises(providers.BadIdToken, match="expired"):
        providers.verify_id_token(chosen, token, "n")
