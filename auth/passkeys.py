"""Passkeys (PASSKEY_ENABLED): GoTrue's registration and sign-in ceremonies, and a user's list of
them. py_webauthn (Duo Labs) makes the options and verifies attestations and assertions: no CBOR
or COSE is read here. The relying party is WEBAUTHN_RP_ID and WEBAUTHN_RP_ORIGINS (SITE_URL's by
default), so a credential made for another site, or a ceremony run from another origin, fails.

A challenge is used up by the one verify that names it, in a transaction of its own that commits
whatever the verification concludes: a replay finds nothing, and of two racing verifies one wins
(a conditional DELETE). An assertion must raise the credential's sign counter (unless the
authenticator keeps none: 0 and 0), and the new count is stored only over the one it was checked
against, so a cloned authenticator racing the real one loses too."""

import hashlib
import json
import uuid
from datetime import timedelta

import webauthn
from sqlalchemy import delete, func, select, update
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from auth import audit, sessions, tokens
from auth.users import is_anonymous, load_user, timestamp
from config import setting
from database import transactions
from database.transactions import transactional
from errors import APIError, Auth, user_not_found, validation_failed
from extensions import db
from models.auth import Factor, Profile, WebAuthnChallenge, WebAuthnCredential

REGISTRATION, AUTHENTICATION = "registration", "authentication"
METHOD = "passkey"  # GoTrue's amr method for a passkey sign-in
MAX_NAME = 120
TIMEOUT_MS = 60000
DEFAULT_NAME = "Passkey"
# What a malformed credential can make the parsers raise, beside the library's own errors.
MALFORMED = (WebAuthnException, ValueError, TypeError, KeyError, AttributeError)


def disabled():
    return APIError(404, Auth.PASSKEY_DISABLED, "Passkeys are disabled")


def verification_failed():
    return APIError(400, Auth.WEBAUTHN_VERIFICATION_FAILED, "Credential verification failed")


def credential_key(raw_id):
    """What the unique index holds of a credential id (up to 1023 bytes): its SHA-256."""
    return hashlib.sha256(raw_id).hexdigest()


def user_handle(user_id):
    """The WebAuthn user handle of a user: their id's digits (no address, nothing personal)."""
    return str(user_id).encode()


def options_json(options):
    """py_webauthn's options as the JSON the browser's WebAuthn (and auth-js) reads."""
    return json.loads(webauthn.options_to_json(options))


def relying_party():
    return setting("WEBAUTHN_RP_ID"), setting("WEBAUTHN_RP_ORIGINS")


# --- challenges


def store_challenge(kind, challenge, user_id=None, factor_id=None, ip=None):
    """Keep a challenge for its ceremony's verify: (its id, when it expires, unix seconds). Expired
    ones are swept here, so the table holds the ceremonies under way."""
    now = tokens.utcnow()
    db.session.execute(delete(WebAuthnChallenge).where(WebAuthnChallenge.expires_at < now))
    lifetime = setting("WEBAUTHN_CHALLENGE_EXPIRY_DURATION")
    row = WebAuthnChallenge(
        id=str(uuid.uuid4()),
        kind=kind,
        user_id=user_id,
        factor_id=factor_id,
        challenge=bytes_to_base64url(challenge),
        ip_address=ip,
        created_at=now,
        expires_at=now + timedelta(seconds=lifetime),
    )
    db.session.add(row)
    return row.id, tokens.now() + lifetime


def _take_challenge(challenge_id, kind, user_id=None, factor_id=None):
    """The challenge `challenge_id` of this ceremony and user, used up: (its bytes, the IP it was given
    to); a 400 when there is none (never issued, another user's, already used, lost to a racing
    verify) or it has expired."""
    try:
        uuid.UUID(str(challenge_id))
    except ValueError:
        raise validation_failed("challenge_id must be a valid UUID") from None
    mine = (
        WebAuthnChallenge.id == challenge_id,
        WebAuthnChallenge.kind == kind,
        WebAuthnChallenge.user_id.is_(None) if user_id is None else WebAuthnChallenge.user_id == user_id,
    )
    if factor_id is not None:
        mine += (WebAuthnChallenge.factor_id == factor_id,)
    found = db.session.execute(select(WebAuthnChallenge).where(*mine)).scalar_one_or_none()
    # The DELETE is the claim: of two verifies of one challenge, exactly one removes the row.
    if found is None or not db.session.execute(delete(WebAuthnChallenge).where(*mine)).rowcount:
        raise APIError(400, Auth.WEBAUTHN_CHALLENGE_NOT_FOUND, "Challenge not found or already used")
    if found.expires_at <= tokens.utcnow():
        raise transactions.CommitAndRaise(
            APIError(400, Auth.WEBAUTHN_CHALLENGE_EXPIRED, "Challenge has expired")
        )
    return base64url_to_bytes(found.challenge), found.ip_address


def take_challenge(challenge_id, kind, user_id=None, factor_id=None):
    """_take_challenge committed on its own: used up whatever the verification then concludes."""
    return transactions.write(_take_challenge, challenge_id, kind, user_id, factor_id)


# --- registration (a signed-in user adds a passkey)


def require_management_level(who):
    """GoTrue's rule: a user with a verified second factor manages passkeys from an aal2 session."""
    verified = select(Factor.id).where(Factor.user_id == who.user_id, Factor.status == "verified").limit(1)
    if db.session.execute(verified).first() is not None and sessions.level(who.session_id) != sessions.AAL2:
        raise APIError(
            403, Auth.INSUFFICIENT_AAL, "AAL2 session is required to manage passkeys when MFA is enabled"
        )


def _passkeys_of(user_id):
    query = (
        select(WebAuthnCredential)
        .where(WebAuthnCredential.user_id == user_id, WebAuthnCredential.factor_id.is_(None))
        .order_by(WebAuthnCredential.created_at, WebAuthnCredential.id)
    )
    return db.session.execute(query).scalars().all()


def _check_room(user_id):
    if len(_passkeys_of(user_id)) >= setting("PASSKEY_MAX_PASSKEYS_PER_USER"):
        raise APIError(422, Auth.TOO_MANY_PASSKEYS, "Maximum number of passkeys reached")


def creation_options(user_id, email, display_name, existing):
    """WebAuthn creation options for a user (py_webauthn's, as the browser's JSON) and the challenge."""
    rp_id, _ = relying_party()
    options = webauthn.generate_registration_options(
        rp_id=rp_id,
        rp_name=setting("WEBAUTHN_RP_DISPLAY_NAME"),
        user_id=user_handle(user_id),
        user_name=email or str(user_id),
        user_display_name=display_name or email or str(user_id),
        timeout=TIMEOUT_MS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(found.credential_id)) for found in existing
        ],
    )
    return options_json(options), options.challenge


@transactional
def registration_options(who):
    """POST /passkeys/registration/options: {challenge_id, options, expires_at}."""
    require_management_level(who)
    _check_room(who.user_id)
    email = "" if is_anonymous(who.user.email) else who.user.email
    name = " ".join(part for part in (who.user.first_name, who.user.last_name) if part)
    options, challenge = creation_options(who.user_id, email, name, _passkeys_of(who.user_id))
    challenge_id, expires_at = store_challenge(REGISTRATION, challenge, who.user_id)
    return {"challenge_id": challenge_id, "options": options, "expires_at": expires_at}


def verified_registration(credential, challenge):
    """py_webauthn's verification of a creation response against our relying party; a 400 if it fails."""
    rp_id, origins = relying_party()
    try:
        return webauthn.verify_registration_response(
            credential=credential, expected_challenge=challenge, expected_rp_id=rp_id, expected_origin=origins
        )
    except MALFORMED:
        raise verification_failed() from None


def registration_verify(who, challenge_id, credential):
    """POST /passkeys/registration/verify: the new passkey's {id, friendly_name, created_at}."""
    transactions.read(require_management_level, who)
    challenge, _ = take_challenge(challenge_id, REGISTRATION, who.user_id)
    verified = verified_registration(credential, challenge)
    return transactions.write(_add_passkey, who.user_id, verified, credential)


def store_credential(user_id, verified, credential, name, factor_id=None):
    """A row for a verified credential (not committed); 422 when the credential is registered already."""
    key = credential_key(verified.credential_id)
    taken = select(WebAuthnCredential.id).where(WebAuthnCredential.credential_key == key)
    if db.session.execute(taken).first() is not None:
        raise APIError(422, Auth.WEBAUTHN_CREDENTIAL_EXISTS, "This credential is already registered")
    now = tokens.utcnow()
    transports = credential["response"].get("transports")  # verified: a dict with a response object
    row = WebAuthnCredential(
        id=str(uuid.uuid4()),
        user_id=user_id,
        credential_key=key,
        credential_id=bytes_to_base64url(verified.credential_id),
        public_key=bytes_to_base64url(verified.credential_public_key),
        sign_count=verified.sign_count,
        aaguid=verified.aaguid,
        transports=[str(t)[:32] for t in transports[:8]] if isinstance(transports, list) else None,
        friendly_name=name,
        factor_id=factor_id,
        created_at=now,
        updated_at=now,
    )
    db.session.add(row)
    return row


def _add_passkey(user_id, verified, credential):
    _check_room(user_id)  # counted again: two registrations may have started with room for one
    row = store_credential(user_id, verified, credential, DEFAULT_NAME)
    audit.record("passkey_created", audit.user_target(user_id), {"passkey_id": row.id})
    return passkey_object(row)


# --- signing in (the two-step ceremony, discoverable credentials)


@transactional
def authentication_options(ip):
    """POST /passkeys/authentication/options: a challenge for any of this site's passkeys."""
    rp_id, _ = relying_party()
    options = webauthn.generate_authentication_options(
        rp_id=rp_id, timeout=TIMEOUT_MS, user_verification=UserVerificationRequirement.PREFERRED
    )
    challenge_id, expires_at = store_challenge(AUTHENTICATION, options.challenge, ip=ip)
    return {"challenge_id": challenge_id, "options": options_json(options), "expires_at": expires_at}


def parsed_assertion(credential):
    try:
        return parse_authentication_credential_json(credential)
    except MALFORMED:
        raise verification_failed() from None


def check_assertion(stored, parsed, challenge, handle=None):
    """py_webauthn's verification of an assertion by `stored` (a WebAuthnCredential row): the new
    sign count, or a 400. The user handle, when the authenticator gives one, must be its owner's."""
    if parsed.response.user_handle is not None and parsed.response.user_handle != (handle or b""):
        raise verification_failed()
    rp_id, origins = relying_party()
    try:
        verified = webauthn.verify_authentication_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=rp_id,
            expected_origin=origins,
            credential_public_key=base64url_to_bytes(stored.public_key),
            credential_current_sign_count=stored.sign_count,
        )
    except MALFORMED:
        raise verification_failed() from None
    return verified.new_sign_count


def record_use(stored, new_count):
    """Store the new sign count over the one the assertion was checked against, or refuse: another
    assertion of this credential got in first (a clone, or a replay racing the original)."""
    moved = db.session.execute(
        update(WebAuthnCredential)
        .where(WebAuthnCredential.id == stored.id, WebAuthnCredential.sign_count == stored.sign_count)
        .values(sign_count=new_count, last_used_at=tokens.utcnow(), updated_at=tokens.utcnow())
    ).rowcount
    if not moved:
        raise verification_failed()


def authentication_verify(challenge_id, credential):
    """POST /passkeys/authentication/verify: a session for the passkey's owner."""
    challenge, _ = take_challenge(challenge_id, AUTHENTICATION)
    parsed = parsed_assertion(credential)
    return transactions.write(_sign_in, parsed, challenge)


def _sign_in(parsed, challenge):
    key = credential_key(parsed.raw_id)
    stored = db.session.execute(
        select(WebAuthnCredential).where(
            WebAuthnCredential.credential_key == key, WebAuthnCredential.factor_id.is_(None)
        )
    ).scalar_one_or_none()
    if stored is None:
        raise verification_failed()
    record_use(stored, check_assertion(stored, parsed, challenge, user_handle(stored.user_id)))
    sessions.check_may_sign_in(stored.user_id)
    unconfirmed = db.session.execute(select(Profile.unconfirmed).where(Profile.user_id == stored.user_id))
    if unconfirmed.scalar():
        raise APIError(403, Auth.EMAIL_NOT_CONFIRMED, "Email not confirmed")
    audit.record("passkey_sign_in", audit.user_target(stored.user_id), {"passkey_id": stored.id})
    return sessions.start(stored.user_id, METHOD)


# --- a user's passkeys


def passkey_object(row):
    """GoTrue's passkey item; a name or last use it lacks is left out, as GoTrue's omitempty does."""
    shown = {"id": row.id, "created_at": timestamp(row.created_at)}
    if row.friendly_name:
        shown["friendly_name"] = row.friendly_name
    if row.last_used_at is not None:
        shown["last_used_at"] = timestamp(row.last_used_at)
    return shown


def list_passkeys(user_id):
    return [passkey_object(row) for row in _passkeys_of(user_id)]


def _owned(user_id, passkey_id, lock=False):
    try:
        uuid.UUID(passkey_id)
    except ValueError:
        raise APIError(404, Auth.VALIDATION_FAILED, "Passkey not found") from None
    query = select(WebAuthnCredential).where(
        WebAuthnCredential.id == passkey_id,
        WebAuthnCredential.user_id == user_id,
        WebAuthnCredential.factor_id.is_(None),
    )
    found = db.session.execute(query.with_for_update() if lock else query).scalar_one_or_none()
    if found is None:
        raise APIError(404, Auth.VALIDATION_FAILED, "Passkey not found")
    return found


@transactional
def rename(who, passkey_id, name):
    """PATCH /passkeys/{id} {friendly_name}."""
    if not isinstance(name, str) or not name.strip():
        raise validation_failed("friendly_name is required")
    if len(name) > MAX_NAME:
        raise validation_failed(f"friendly_name must be {MAX_NAME} characters or less")
    found = _owned(who.user_id, passkey_id, lock=True)
    found.friendly_name, found.updated_at = name, tokens.utcnow()
    audit.record("passkey_updated", audit.user_target(who.user_id), {"passkey_id": found.id})
    return passkey_object(found)


@transactional
def remove(who, passkey_id):
    """DELETE /passkeys/{id}."""
    require_management_level(who)
    found = _owned(who.user_id, passkey_id, lock=True)
    db.session.delete(found)
    audit.record("passkey_deleted", audit.user_target(who.user_id), {"passkey_id": found.id})


def admin_list(user_id):
    if load_user(user_id) is None:
        raise user_not_found()
    return list_passkeys(user_id)


@transactional
def admin_remove(user_id, passkey_id):
    if load_user(user_id) is None:
        raise user_not_found()
    found = _owned(user_id, passkey_id, lock=True)
    db.session.delete(found)
    audit.record("passkey_deleted", audit.user_target(user_id), {"passkey_id": found.id})


def count_by_user(user_ids):
    """{user_id: how many passkeys} of the given users, for the dashboard's list."""
    if not user_ids:
        return {}
    query = (
        select(WebAuthnCredential.user_id, func.count())
        .where(WebAuthnCredential.user_id.in_(user_ids), WebAuthnCredential.factor_id.is_(None))
        .group_by(WebAuthnCredential.user_id)
    )
    return dict(db.session.execute(query).all())
