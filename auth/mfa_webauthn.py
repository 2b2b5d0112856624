"""WebAuthn as a second factor (MFA_WEB_AUTHN_ENROLL_ENABLED, MFA_WEB_AUTHN_VERIFY_ENABLED): GoTrue's
`mfa.enroll({factorType: 'webauthn'})`, then a challenge whose options create the factor's
credential (its first verify) or ask for an assertion by it (every later one), and a verify that
raises the session to aal2. The ceremonies, challenges and counters are auth/passkeys.py's, with
py_webauthn verifying; a factor's credential is its own (a passkey never answers for it)."""

import uuid

import webauthn
from sqlalchemy import delete, select
from webauthn.helpers import base64url_to_bytes
from webauthn.helpers.structs import PublicKeyCredentialDescriptor, UserVerificationRequirement

from auth import audit, passkeys, sessions, tokens
from auth.users import is_anonymous
from config import setting
from database import transactions
from database.transactions import transactional
from errors import APIError, Auth, validation_failed
from extensions import db
from models.auth import Factor, Session, WebAuthnCredential

WEBAUTHN = "webauthn"
CREATE, REQUEST = "create", "request"
KINDS = {CREATE: "mfa_create", REQUEST: "mfa_request"}  # WebAuthnChallenge.kind of each ceremony
UNVERIFIED, VERIFIED = "unverified", "verified"


def enroll_disabled():
    return APIError(422, Auth.MFA_WEBAUTHN_ENROLL_NOT_ENABLED, "MFA enroll is disabled for WebAuthn")


def verify_disabled():
    return APIError(422, Auth.MFA_WEBAUTHN_VERIFY_NOT_ENABLED, "MFA verification is disabled for WebAuthn")


def enroll(who, friendly_name, check_factors):
    """A new unverified WebAuthn factor: {id, type, friendly_name}. `check_factors` is mfa.py's
    shared rule (names, how many, aal2 once a factor is verified), run in this transaction."""
    if not setting("MFA_WEB_AUTHN_ENROLL_ENABLED"):
        raise enroll_disabled()
    return transactions.write(_enroll, who, friendly_name or "", check_factors)


def _enroll(who, friendly_name, check_factors):
    check_factors(who, friendly_name)
    now = tokens.utcnow()
    factor = Factor(
        id=str(uuid.uuid4()),
        user_id=who.user_id,
        friendly_name=friendly_name,
        factor_type=WEBAUTHN,
        status=UNVERIFIED,
        secret="",  # a WebAuthn factor's key is its credential's public key, kept beside it
        created_at=now,
        updated_at=now,
    )
    db.session.add(factor)
    details = {"factor_id": factor.id, "type": WEBAUTHN}
    audit.record("factor_enrolled", audit.user_target(who.user_id), details)
    return {"id": factor.id, "type": WEBAUTHN, "friendly_name": friendly_name}


def _credential_of(factor_id):
    found = select(WebAuthnCredential).where(WebAuthnCredential.factor_id == factor_id)
    return db.session.execute(found).scalar_one_or_none()


@transactional
def challenge(who, factor, ip):
    """GoTrue's challenge of a WebAuthn factor: creation options while it is unverified, request
    options for its credential after; {id, type, expires_at, webauthn: {type, credential_options}}."""
    if not setting("MFA_WEB_AUTHN_VERIFY_ENABLED"):
        raise verify_disabled()
    factor = db.session.merge(factor)
    factor.last_challenged_at = tokens.utcnow()
    credential = _credential_of(factor.id) if factor.status == VERIFIED else None
    if credential is None:
        email = "" if is_anonymous(who.user.email) else who.user.email
        mine = select(WebAuthnCredential).where(WebAuthnCredential.user_id == who.user_id)
        existing = db.session.execute(mine).scalars().all()
        options, raw = passkeys.creation_options(who.user_id, email, factor.friendly_name, existing)
        ceremony = CREATE
    else:
        rp_id, _ = passkeys.relying_party()
        made = webauthn.generate_authentication_options(
            rp_id=rp_id,
            timeout=passkeys.TIMEOUT_MS,
            user_verification=UserVerificationRequirement.PREFERRED,
            allow_credentials=[
                PublicKeyCredentialDescriptor(id=base64url_to_bytes(credential.credential_id))
            ],
        )
        options, raw = passkeys.options_json(made), made.challenge
        ceremony = REQUEST
    challenge_id, expires_at = passkeys.store_challenge(KINDS[ceremony], raw, who.user_id, factor.id, ip)
    return {
        "id": challenge_id,
        "type": WEBAUTHN,
        "expires_at": expires_at,
        "webauthn": {"type": ceremony, "credential_options": {"publicKey": options}},
    }


def verify(who, factor_id, challenge_id, answer, ip, check_first):
    """A WebAuthn factor's answer: {type: create|request, credential_response}. The challenge is used
    up first (in a transaction of its own); the session raised to aal2, as a new session object.
    `check_first(who, factor)`: mfa's rule for a factor's first verification (aal2 once another
    factor is verified)."""
    if not setting("MFA_WEB_AUTHN_VERIFY_ENABLED"):
        raise verify_disabled()
    if not isinstance(answer, dict):
        raise validation_failed("WebAuthn config required")
    ceremony, response = answer.get("type"), answer.get("credential_response")
    if ceremony not in KINDS:
        raise validation_failed("WebAuthn type must be create or request")
    if not isinstance(response, dict):
        raise validation_failed("credential_response required")
    raw, challenged_from = passkeys.take_challenge(challenge_id, KINDS[ceremony], who.user_id, factor_id)
    if challenged_from != ip:
        raise APIError(422, Auth.MFA_IP_ADDRESS_MISMATCH, "Challenge and verify IP addresses mismatch.")
    if ceremony == CREATE:
        verified = passkeys.verified_registration(response, raw)
        return transactions.write(_first_verify, who, factor_id, verified, response, check_first)
    return transactions.write(_verify_assertion, who, factor_id, passkeys.parsed_assertion(response), raw)


def _first_verify(who, factor_id, verified, response, check_first):
    factor = _locked(who.user_id, factor_id)
    if factor.status == VERIFIED or _credential_of(factor.id) is not None:
        raise passkeys.verification_failed()  # a create ceremony for a factor that has its key
    check_first(who, factor)
    passkeys.store_credential(who.user_id, verified, response, factor.friendly_name, factor_id=factor.id)
    factor.status, factor.updated_at = VERIFIED, tokens.utcnow()
    audit.record("factor_verified", audit.user_target(who.user_id), {"factor_id": factor.id})
    # GoTrue drops the user's other unverified WebAuthn factors once one is verified.
    db.session.execute(
        delete(Factor).where(
            Factor.user_id == who.user_id,
            Factor.status == UNVERIFIED,
            Factor.factor_type == WEBAUTHN,
            Factor.id != factor.id,
        )
    )
    return _step_up(who, factor.id)


def _verify_assertion(who, factor_id, parsed, raw):
    factor = _locked(who.user_id, factor_id)
    stored = _credential_of(factor.id)
    if stored is None or stored.credential_key != passkeys.credential_key(parsed.raw_id):
        raise passkeys.verification_failed()
    handle = passkeys.user_handle(who.user_id)
    passkeys.record_use(stored, passkeys.check_assertion(stored, parsed, raw, handle))
    return _step_up(who, factor.id)


def _locked(user_id, factor_id):
    found = select(Factor).where(Factor.id == factor_id, Factor.user_id == user_id).with_for_update()
    factor = db.session.execute(found).scalar_one_or_none()
    if factor is None:
        raise APIError(404, Auth.MFA_FACTOR_NOT_FOUND, "Factor not found")
    return factor


def _step_up(who, factor_id):
    session = db.session.execute(
        select(Session).where(Session.id == who.session_id).with_for_update()
    ).scalar_one_or_none()
    if session is None:
        raise APIError(401, Auth.SESSION_NOT_FOUND, "Session from session_id claim in JWT does not exist")
    return sessions.step_up(session, factor_id, WEBAUTHN)


def forget_credential(factor_id):
    """The factor is gone: its credential with it (not committed)."""
    db.session.execute(delete(WebAuthnCredential).where(WebAuthnCredential.factor_id == factor_id))
