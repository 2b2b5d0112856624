"""A software WebAuthn authenticator for the tests, as a browser and a platform authenticator answer
navigator.credentials.create() and .get(): a P-256 key per credential, a "none" attestation, an
assertion signed over authenticatorData and the client data's hash. Its knobs make the attacks:
another origin or RP id, a sign counter that goes back, another user's handle.

It encodes with cbor2 and signs with cryptography; it checks nothing (the server must)."""

import base64
import hashlib
import json
import os

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP, UV, AT = 0x01, 0x04, 0x40  # authenticatorData flags: user present, user verified, attested data


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Credential:
    def __init__(self, user_handle, rp_id):
        self.id = os.urandom(32)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.user_handle = user_handle
        self.rp_id = rp_id
        self.count = 0

    def cose_key(self):
        numbers = self.key.public_key().public_numbers()
        return {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}


class Authenticator:
    def __init__(self, rp_id="localhost", origin="http://localhost:5173", counting=True):
        self.rp_id, self.origin, self.counting = rp_id, origin, counting
        self.credentials = []

    def client_data(self, kind, challenge, origin):
        data = {"type": kind, "challenge": challenge, "origin": origin or self.origin, "crossOrigin": False}
        return json.dumps(data).encode()

    def create(self, options, origin=None, rp_id=None, credential=None):
        """navigator.credentials.create(): a new credential (or `credential` again) as the browser's JSON."""
        rp_id = rp_id or options["rp"]["id"]
        made = credential or Credential(unb64url(options["user"]["id"]), rp_id)
        if credential is None:
            self.credentials.append(made)
        client_data = self.client_data("webauthn.create", options["challenge"], origin)
        attested = bytes(16) + len(made.id).to_bytes(2, "big") + made.id + cbor2.dumps(made.cose_key())
        auth_data = (
            hashlib.sha256(rp_id.encode()).digest() + bytes([UP | UV | AT]) + made.count.to_bytes(4, "big")
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data + attested})
        return {
            "id": b64url(made.id),
            "rawId": b64url(made.id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
        }

    def get(self, options, credential=None, origin=None, rp_id=None, count=None, user_handle=None):
        """navigator.credentials.get(): an assertion by `credential` (the first made by default)."""
        used = credential or self.credentials[0]
        if count is not None:
            used.count = count
        elif self.counting:
            used.count += 1
        rp_id = rp_id or options.get("rpId") or used.rp_id
        client_data = self.client_data("webauthn.get", options["challenge"], origin)
        auth_data = hashlib.sha256(rp_id.encode()).digest() + bytes([UP | UV]) + used.count.to_bytes(4, "big")
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = used.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return {
            "id": b64url(used.id),
            "rawId": b64url(used.id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": b64url(user_handle if user_handle is not None else used.user_handle),
            },
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
        }
