"""Third-party providers: where each one's endpoints are, the OAuth 2 authorization code flow
against them (Authlib's client), verifying their ID tokens against their published keys
(PyJWT, as every other token of minibase), and each one's profile as one shape.

Nothing here touches the database: a provider is slow or down on its own time, outside any
transaction. Every failure to talk to a provider is a ProviderError."""

import hashlib
import math
import threading
import time
from dataclasses import dataclass

import jwt
import requests
from authlib.integrations.requests_client import OAuth2Session, OAuthError

import turns
from auth import tokens
from config import setting
from variables import PROVIDERS

TIMEOUT = 10  # seconds for any one call to a provider
DISCOVERY_LIFETIME = 3600
JWKS_REFETCH_AFTER = 10  # an unknown `kid` refetches the keys, at most this often (a forged kid
# must not make every request a call to the provider)
# What an ID token may be signed with, by the type of the key that verifies it (a key's own `alg`,
# when its JWK names one, narrows it to that one).
KEY_ALGORITHMS = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}
CLOCK_LEEWAY = 30  # seconds a provider's clock may be off ours (exp, nbf, iat)
REQUIRED_CLAIMS = ("iss", "aud", "exp", "sub")
# Providers whose ID tokens the id_token grant takes (native sign-in on phones).
ID_TOKEN_PROVIDERS = ("apple", "azure", "google", "keycloak")


class ProviderError(Exception):
    """A provider could not be reached or answered something unusable; the text is for the log."""


class ProviderRefused(ProviderError):
    """The provider answered, and said no: it refused the code or our client's credentials."""


class BadIdToken(Exception):
    """An ID token that does not verify; the text says why, and may be shown."""


@dataclass(frozen=True)
class Kind:
    """How a family of providers is spoken to: OpenID Connect by discovery, or a plain OAuth 2
    server and a profile API (`read_profile`)."""

    default_url: str | None
    scopes: str
    oidc: bool = True
    authorize_path: str = ""
    token_path: str = ""
    auth_method: str = "client_secret_basic"


KINDS = {
    "apple": Kind("https://appleid.apple.com", "name email"),
    "azure": Kind("https://login.microsoftonline.com/common/v2.0", "openid email profile"),
    "discord": Kind("https://discord.com", "identify email", False, "/oauth2/authorize", "/api/oauth2/token"),
    "github": Kind(
        "https://github.com",
        "read:user user:email",
        False,
        "/login/oauth/authorize",
        "/login/oauth/access_token",
        "client_secret_post",
    ),
    "gitlab": Kind("https://gitlab.com", "openid email profile"),
    "google": Kind("https://accounts.google.com", "openid email profile"),
    "keycloak": Kind(None, "openid email profile"),  # any OpenID provider: EXTERNAL_KEYCLOAK_URL
}


@dataclass(frozen=True)
class Provider:
    name: str
    kind: Kind
    url: str
    client_ids: tuple
    secret: str
    redirect_uri: str

    @property
    def client_id(self):
        return self.client_ids[0]


def _setting(name, part):
    return setting(f"EXTERNAL_{name.upper()}_{part}")


def enabled():
    """The names of the providers this deployment turned on."""
    return [name for name in PROVIDERS if _setting(name, "ENABLED")]


def provider(name):
    """The enabled provider `name`, or None."""
    if name not in PROVIDERS or not _setting(name, "ENABLED"):
        return None
    kind = KINDS[name]
    ids = tuple(part.strip() for part in (_setting(name, "CLIENT_ID") or "").split(",") if part.strip())
    redirect_uri = _setting(name, "REDIRECT_URI") or f"{setting('API_EXTERNAL_URL')}/auth/v1/callback"
    url = (_setting(name, "URL") or kind.default_url or "").rstrip("/")
    return Provider(name, kind, url, ids, _setting(name, "SECRET") or "", redirect_uri)


# --- what the provider publishes about itself (cached per process)

_lock = threading.Lock()
_discovered = {}  # issuer -> (fetched at, document)
_keys = {}  # jwks_uri -> (fetched at, [Key])


def _get_json(url, **kwargs):
    try:
        with turns.waiting():
            response = requests.get(url, timeout=TIMEOUT, **kwargs)
        response.raise_for_status()
        return response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderError(f"GET {url}: {exc.__class__.__name__}") from None


def discovery(issuer):
    """The provider's OpenID configuration (its endpoints and keys), fetched once an hour."""
    with _lock:
        cached = _discovered.get(issuer)
    if cached is not None and time.monotonic() - cached[0] < DISCOVERY_LIFETIME:
        return cached[1]
    document = _get_json(f"{issuer}/.well-known/openid-configuration")
    if not isinstance(document, dict) or "jwks_uri" not in document:
        raise ProviderError(f"{issuer}: discovery document lacks jwks_uri")
    with _lock:
        _discovered[issuer] = (time.monotonic(), document)
    return document


@dataclass(frozen=True)
class Key:
    """A provider's published verification key: its `kid`, the algorithms it may verify, the key."""

    kid: str | None
    algorithms: tuple
    key: object


def _key_set(jwks_uri, refetch=False):
    with _lock:
        cached = _keys.get(jwks_uri)
    stale = cached is None or (refetch and time.monotonic() - cached[0] >= JWKS_REFETCH_AFTER)
    if not stale:
        return cached[1]
    document = _get_json(jwks_uri)
    published = document.get("keys") if isinstance(document, dict) else None
    keys = [key for key in map(_imported, published if isinstance(published, list) else []) if key]
    if not keys:
        raise ProviderError(f"{jwks_uri}: unusable key set: no signing key minibase can use")
    with _lock:
        _keys[jwks_uri] = (time.monotonic(), keys)
    return keys


def _imported(jwk):
    """A Key of a published JWK, or None for one that is not an RSA, EC or OKP public key that can
    verify (a key of a type not understood is left out, as RFC 7517 asks, not the whole set)."""
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig" or jwk.get("kty") not in KEY_ALGORITHMS:
        return None
    algorithms = KEY_ALGORITHMS[jwk["kty"]]
    if "alg" in jwk:
        algorithms = (jwk["alg"],) if jwk["alg"] in algorithms else ()
    try:
        key = jwt.PyJWK(jwk, algorithms[0] if algorithms else None).key
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        return None
    kid = jwk.get("kid")
    return Key(kid if isinstance(kid, str) else None, algorithms, key) if algorithms else None


# --- ID tokens


def verify_id_token(chosen, id_token, nonce=None):
    """The claims of an ID token `chosen` issued: signed by one of its published keys (the keys are
    fetched again when the token names one not seen yet), by its issuer, for one of our client ids,
    unexpired, and carrying `nonce` when one is expected (None: it must carry none)."""
    meta = discovery(chosen.url)
    if not isinstance(id_token, str) or not id_token.isascii():
        raise BadIdToken("not a JWT")
    try:
        header = jwt.get_unverified_header(id_token)
        # Azure's multi-tenant issuer names the tenant in each token: the issuer to check is the
        # token's tenant's, read before the signature (which is then checked against it).
        unverified = jwt.decode(id_token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise BadIdToken(f"bad signature or format ({exc})") from None
    issuer = meta.get("issuer", chosen.url)
    if "{tenantid}" in issuer:
        issuer = issuer.replace("{tenantid}", str(unverified.get("tid", "")))
    key = _key_for(header, _key_set(meta["jwks_uri"]))
    if key is None:  # a key the provider published since we fetched its keys
        key = _key_for(header, _key_set(meta["jwks_uri"], refetch=True))
    if key is None:
        raise BadIdToken("bad signature or format (no published key for the token's kid and alg)")
    try:
        claims = jwt.decode(
            id_token,
            key.key,
            algorithms=[header["alg"]],
            issuer=issuer,
            audience=list(chosen.client_ids),
            # times against tokens.now, the one clock, below
            options={"require": list(REQUIRED_CLAIMS), "verify_exp": False, "verify_nbf": False,
                     "verify_iat": False},
        )  # fmt: skip
    except jwt.PyJWTError as exc:
        raise BadIdToken(f"bad signature or claims ({exc})") from None
    _check_times(claims)
    if (claims.get("nonce") or None) != nonce:
        raise BadIdToken("Nonces mismatch")
    return claims


def _key_for(header, keys):
    """The published key that verifies a token with this header: the one of its `kid` (or the only
    one, when the token names none) that may verify its `alg`; None when there is none."""
    kid, alg = header.get("kid"), header.get("alg")
    named = keys if kid is None and len(keys) == 1 else [key for key in keys if key.kid == kid]
    return next((key for key in named if alg in key.algorithms), None)


def _check_times(claims):
    """exp, and nbf and iat when present: numbers, and within CLOCK_LEEWAY of ours (an ID token
    issued in the future, or not valid yet, is refused as one that has expired)."""
    now = tokens.now()
    for claim in ("exp", "nbf", "iat"):
        value = claims.get(claim)
        if claim != "exp" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise BadIdToken(f"invalid_claim: Claim '{claim}' must be a NumericDate value")
    if claims["exp"] <= now - CLOCK_LEEWAY:
        raise BadIdToken("expired_token: The token has expired")
    if claims.get("nbf", -math.inf) > now + CLOCK_LEEWAY:
        raise BadIdToken("invalid_claim: The token is not yet valid")
    if claims.get("iat", -math.inf) > now + CLOCK_LEEWAY:
        raise BadIdToken("invalid_claim: The token was issued in the future")


def hashed_nonce(nonce):
    """What an ID token carries for the `nonce` a phone app gave: its SHA-256, in hex (GoTrue's rule)."""
    return hashlib.sha256(nonce.encode()).hexdigest() if nonce else None


# --- the authorization code flow


def _client(chosen, scope=None):
    return OAuth2Session(
        chosen.client_id,
        chosen.secret,
        token_endpoint_auth_method=chosen.kind.auth_method,
        scope=scope,
        redirect_uri=chosen.redirect_uri,
    )


def endpoints(chosen):
    """(authorization, token) endpoint URLs of a provider."""
    if chosen.kind.oidc:
        meta = discovery(chosen.url)
        return meta["authorization_endpoint"], meta["token_endpoint"]
    return chosen.url + chosen.kind.authorize_path, chosen.url + chosen.kind.token_path


def authorization_url(chosen, state, nonce, scopes=None):
    """Where to send the browser to sign in at the provider."""
    scope = " ".join(dict.fromkeys((chosen.kind.scopes + " " + (scopes or "")).split()))
    authorize, _ = endpoints(chosen)
    extra = {"nonce": nonce} if chosen.kind.oidc else {}
    url, _ = _client(chosen, scope).create_authorization_url(authorize, state=state, **extra)
    return url


def profile_from_code(chosen, code, nonce):
    """The user the provider vouches for, given the code it sent back: its profile (see
    normal_profile), after exchanging the code for its tokens."""
    _, token_url = endpoints(chosen)
    client = _client(chosen)
    try:
        with turns.waiting():
            token = client.fetch_token(
                token_url, code=code, timeout=TIMEOUT, headers={"Accept": "application/json"}
            )
    except OAuthError as exc:
        raise ProviderRefused(f"token endpoint of {chosen.name}: {exc.error}: {exc.description}") from None
    except (requests.RequestException, ValueError) as exc:
        raise ProviderError(f"token endpoint of {chosen.name}: {exc.__class__.__name__}: {exc}") from None
    if chosen.kind.oidc:
        if "id_token" not in token:
            raise ProviderError(f"{chosen.name} sent no id_token")
        try:
            claims = dict(verify_id_token(chosen, token["id_token"], nonce))
        except BadIdToken as exc:
            raise ProviderError(f"{chosen.name}'s id_token: {exc}") from None
        userinfo = discovery(chosen.url).get("userinfo_endpoint")
        if userinfo:
            extra = _api(client, userinfo)
            if isinstance(extra, dict) and extra.get("sub") == claims["sub"]:
                claims = {**extra, **claims}
        return normal_profile(claims)
    return READERS[chosen.name](chosen, client)


def _api(client, url):
    try:
        with turns.waiting():
            response = client.get(url, timeout=TIMEOUT, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()
    except (OAuthError, requests.RequestException, ValueError) as exc:
        raise ProviderError(f"GET {url}: {exc.__class__.__name__}") from None


def _verified(value):
    return value is True or value == "true"  # Apple sends the string "true"


def normal_profile(claims):
    """One shape for every provider: `sub`, `email` (lower-cased), `email_verified`, and the rest
    of what it said (kept as the identity's data)."""
    data = {
        key: value for key, value in claims.items() if key not in ("aud", "exp", "iat", "nonce", "at_hash")
    }
    email = claims.get("email")
    data["sub"] = str(claims["sub"])
    data["email"] = email.strip().lower() if isinstance(email, str) and email.strip() else None
    data["email_verified"] = bool(data["email"]) and _verified(claims.get("email_verified"))
    data["provider_id"] = data["sub"]
    data.setdefault("full_name", claims.get("name"))
    data.setdefault("avatar_url", claims.get("picture"))
    return data


def _github(chosen, client):
    """GitHub's /user and /user/emails (GitHub Enterprise's under /api/v3): the primary address,
    verified, else any verified one; an address GitHub has not verified counts as none."""
    api = "https://api.github.com" if chosen.url == "https://github.com" else f"{chosen.url}/api/v3"
    user = _api(client, f"{api}/user")
    emails = _api(client, f"{api}/user/emails")
    if not isinstance(user, dict) or "id" not in user or not isinstance(emails, list):
        raise ProviderError("github: unexpected profile")
    ranked = sorted(
        (entry for entry in emails if isinstance(entry, dict) and entry.get("email")),
        key=lambda entry: (not entry.get("verified"), not entry.get("primary")),
    )
    chosen_email = ranked[0] if ranked else {}
    return normal_profile(
        {
            "sub": user["id"],
            "email": chosen_email.get("email"),
            "email_verified": chosen_email.get("verified") is True,
            "name": user.get("name"),
            "picture": user.get("avatar_url"),
            "preferred_username": user.get("login"),
            "user_name": user.get("login"),
            "iss": api,
        }
    )


def _discord(chosen, client):
    user = _api(client, f"{chosen.url}/api/users/@me")
    if not isinstance(user, dict) or "id" not in user:
        raise ProviderError("discord: unexpected profile")
    avatar = user.get("avatar")
    return normal_profile(
        {
            "sub": user["id"],
            "email": user.get("email"),
            "email_verified": user.get("verified") is True,
            "name": user.get("global_name") or user.get("username"),
            "picture": f"https://cdn.discordapp.com/avatars/{user['id']}/{avatar}.png" if avatar else None,
            "preferred_username": user.get("username"),
        }
    )


READERS = {"github": _github, "discord": _discord}
