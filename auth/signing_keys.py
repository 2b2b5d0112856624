"""The keys access tokens are signed and verified with: JWT_SIGNING_KEYS (private JWKs, GoTrue's
GOTRUE_JWT_KEYS form: ES256, RS256, or a symmetric HS256 `oct` key) beside JWT_SECRET (HS256), the JWKS
that publishes the asymmetric keys' public halves, and a new key for the operator to add."""

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from variables import ConfigError

# kty -> the one algorithm a key of that type signs with here (GoTrue's choices for new projects).
ALGORITHMS = {"EC": "ES256", "RSA": "RS256", "oct": "HS256"}
MIN_RSA_BITS = 2048
MIN_OCT_BYTES = 32  # an HS256 key as strong as JWT_SECRET must be
SIGN = "sign"


@dataclass(frozen=True)
class VerifyingKey:
    kid: str
    algorithm: str
    public_key: object
    private_key: object = field(repr=False, default=None)


@dataclass(frozen=True, eq=False)
class Keyring:
    """What tokens are signed and verified with. Hashed by identity: one per running app, so the
    verified-token caches in auth/tokens.py can key on it."""

    secret: str = field(repr=False)
    signing: VerifyingKey | None = None  # None: access tokens are HS256 with the secret
    verifying: dict = field(default_factory=dict)  # kid -> VerifyingKey

    def jwks(self):
        """The public keys, as /.well-known/jwks.json publishes them: built from each asymmetric key's
        public half, so no private member (d, p, q, dp, dq, qi) and no symmetric key (oct) is in it."""
        return {"keys": [public_jwk(key) for key in self.verifying.values() if key.algorithm != "HS256"]}


def public_jwk(key):
    exporter = ECAlgorithm if key.algorithm == "ES256" else RSAAlgorithm
    members = exporter.to_jwk(key.public_key, as_dict=True)
    return {**members, "kid": key.kid, "alg": key.algorithm, "use": "sig", "key_ops": ["verify"]}


def load(configured, secret):
    """The keyring of JWT_SIGNING_KEYS (JSON text or an already parsed list; None: HS256 only).
    Anything that cannot work stops the start with a ConfigError that says which key and why."""
    if configured is None or configured == "":
        return Keyring(secret)
    entries = configured
    if isinstance(configured, str):
        try:
            entries = json.loads(configured)
        except ValueError as exc:
            raise ConfigError(f"JWT_SIGNING_KEYS must be a JSON array of private JWKs: {exc}") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError("JWT_SIGNING_KEYS must be a JSON array of private JWKs, with at least one key")
    keys = [_key(position, entry) for position, entry in enumerate(entries, 1)]
    kids = [key.kid for key in keys]
    duplicated = sorted({kid for kid in kids if kids.count(kid) > 1})
    if duplicated:
        raise ConfigError(f"JWT_SIGNING_KEYS: kid {duplicated[0]!r} names more than one key")
    signing = [key for key, entry in zip(keys, entries, strict=True) if SIGN in entry.get("key_ops", ())]
    if not signing:
        raise ConfigError(
            'JWT_SIGNING_KEYS has no signing key: the key that signs needs "key_ops": ["sign", "verify"]'
        )
    if len(signing) > 1:
        raise ConfigError(
            'JWT_SIGNING_KEYS has several signing keys: only one key\'s key_ops may hold "sign" '
            '(the others verify: give them "key_ops": ["verify"])'
        )
    return Keyring(secret, signing[0], {key.kid: key for key in keys})


def _key(position, entry):
    where = f"JWT_SIGNING_KEYS: key {position}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} is not a JSON object (a JWK)")
    kid = entry.get("kid")
    if not isinstance(kid, str) or not kid.strip():
        raise ConfigError(f"{where} has no kid: each key needs one, which tokens name in their header")
    where = f"JWT_SIGNING_KEYS: key {kid!r}"
    kty = entry.get("kty")
    if kty not in ALGORITHMS:
        raise ConfigError(
            f"{where} has kty {kty!r}: only EC (P-256, ES256), RSA (RS256) and oct (HS256) keys are supported"
        )
    if kty == "EC" and entry.get("crv") != "P-256":
        raise ConfigError(f"{where} is on curve {entry.get('crv')!r}: only P-256 (ES256) is supported")
    algorithm = ALGORITHMS[kty]
    if entry.get("alg", algorithm) != algorithm:
        raise ConfigError(f"{where} has alg {entry.get('alg')!r}: a {kty} key signs with {algorithm} here")
    ops = entry.get("key_ops", [])
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        raise ConfigError(f"{where} has key_ops that are not a list of names")
    if kty == "oct":
        return _symmetric_key(where, kid, entry.get("k"))
    if "d" not in entry:
        raise ConfigError(f"{where} is a public key: JWT_SIGNING_KEYS holds private keys (with d)")
    try:
        private_key = jwt.PyJWK({**entry, "alg": algorithm}).key
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where} is not a valid {kty} private key: {exc}") from None
    if kty == "RSA" and private_key.key_size < MIN_RSA_BITS:
        raise ConfigError(f"{where} has {private_key.key_size} bits: RSA keys need at least {MIN_RSA_BITS}")
    return VerifyingKey(kid, algorithm, private_key.public_key(), private_key)


def _symmetric_key(where, kid, encoded):
    """An HS256 key (GoTrue signs with one, as auth-js's own test server is set up): its `k` is the
    secret itself, so it verifies and signs alike, and is never published."""
    try:
        secret = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError, TypeError):
        secret = b""
    if len(secret) < MIN_OCT_BYTES:
        raise ConfigError(f"{where} is an oct key without a base64url k of at least {MIN_OCT_BYTES} bytes")
    return VerifyingKey(kid, "HS256", secret, secret)


def generate(algorithm="ES256", kid=None):
    """A new private JWK that signs (key_ops sign and verify), for JWT_SIGNING_KEYS."""
    if algorithm == "ES256":
        members = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()), as_dict=True)
    elif algorithm == "RS256":
        members = RSAAlgorithm.to_jwk(rsa.generate_private_key(65537, MIN_RSA_BITS), as_dict=True)
    else:
        raise ValueError(f"unsupported algorithm {algorithm}")
    return {**members, "kid": kid or str(uuid.uuid4()), "alg": algorithm, "key_ops": [SIGN, "verify"]}
