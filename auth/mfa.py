"""A second factor: TOTP factors (enrolled, challenged, verified, unenrolled) as GoTrue's MFA API has
them. pyotp computes the codes, segno draws the QR code, auth/encryption.py seals the secrets.

A code is good for its 30-second step and one step either side, once: a factor remembers the step of
the last code it accepted and takes none of that step or before, across challenges too. A
challenge lives CHALLENGE_EXPIRY seconds and takes at most MAX_ATTEMPTS codes."""

import hmac
import io
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

import pyotp
import segno
from sqlalchemy import delete, func, select, update

from auth import audit, encryption, hooks, mfa_webauthn, sessions, tokens
from auth.users import factor_object, load_user
from config import setting
from database import transactions
from database.transactions import CommitAndRaise, transactional
from errors import APIError, Auth, user_not_found, validation_failed
from extensions import db
from models.auth import Challenge, Factor, Session

TOTP = "totp"
UNVERIFIED, VERIFIED = "unverified", "verified"
CHALLENGE_EXPIRY = 300  # seconds, GoTrue's default
MAX_ATTEMPTS = 5  # codes one challenge takes
UNVERIFIED_EXPIRY = 300  # an unverified factor older than this is dropped at the next enrollment
MAX_FACTORS = 10  # GoTrue's defaults for enrolled and for verified factors
PERIOD, WINDOW = 30, 1  # a step's seconds; steps accepted either side of the current one
QR_SCALE = 3


def factor_not_found(status=404):
    return APIError(status, Auth.MFA_FACTOR_NOT_FOUND, "Factor not found")


def _owned_factor(user_id, factor_id, lock=False):
    try:
        uuid.UUID(factor_id)
    except ValueError:
        raise APIError(404, Auth.VALIDATION_FAILED, "factor_id must be an UUID") from None
    query = select(Factor).where(Factor.id == factor_id, Factor.user_id == user_id)
    factor = db.session.execute(query.with_for_update() if lock else query).scalar_one_or_none()
    if factor is None:
        raise factor_not_found()
    return factor


# --- enrolling


def enroll(who, factor_type, friendly_name, issuer):
    """A new unverified factor: TOTP (its id, and the secret as text, URI and QR code, shown once)
    or WebAuthn (auth/mfa_webauthn.py)."""
    if factor_type not in (TOTP, mfa_webauthn.WEBAUTHN):
        raise validation_failed("factor_type needs to be totp or webauthn")
    friendly_name = friendly_name or ""
    if len(friendly_name) > 255 or len(issuer or "") > 255:
        raise validation_failed("friendly_name and issuer: Longer than maximum length 255.")
    if factor_type == mfa_webauthn.WEBAUTHN:
        return mfa_webauthn.enroll(who, friendly_name, check_new_factor)
    return transactions.write(_enroll_totp, who, friendly_name, issuer)


def check_new_factor(who, friendly_name):
    """GoTrue's rules for a new factor of any type: unverified ones past UNVERIFIED_EXPIRY dropped,
    no two of one name, at most MAX_FACTORS, and an aal2 session once one is verified."""
    now = tokens.utcnow()
    db.session.execute(
        delete(Factor).where(
            Factor.user_id == who.user_id,
            Factor.status == UNVERIFIED,
            Factor.created_at < now - timedelta(seconds=UNVERIFIED_EXPIRY),
        )
    )
    factors = db.session.execute(select(Factor).where(Factor.user_id == who.user_id)).scalars().all()
    if any(factor.friendly_name == friendly_name for factor in factors):
        raise APIError(
            422,
            Auth.MFA_FACTOR_NAME_CONFLICT,
            f'A factor with the friendly name "{friendly_name}" for this user already exists',
        )
    verified = sum(factor.status == VERIFIED for factor in factors)
    if len(factors) >= MAX_FACTORS or verified >= MAX_FACTORS:
        raise APIError(
            422,
            Auth.TOO_MANY_ENROLLED_MFA_FACTORS,
            "Maximum number of verified factors reached, unenroll to continue",
        )
    if verified and sessions.level(who.session_id) != sessions.AAL2:
        raise APIError(403, Auth.INSUFFICIENT_AAL, "AAL2 required to enroll a new factor")


def _enroll_totp(who, friendly_name, issuer):
    check_new_factor(who, friendly_name)
    now = tokens.utcnow()
    secret = pyotp.random_base32(32)
    uri = pyotp.TOTP(secret, interval=PERIOD).provisioning_uri(
        name=who.user.email, issuer_name=issuer or urlsplit(setting("SITE_URL")).netloc or "minibase"
    )
    factor = Factor(
        id=str(uuid.uuid4()),
        user_id=who.user_id,
        friendly_name=friendly_name,
        factor_type=TOTP,
        status=UNVERIFIED,
        created_at=now,
        updated_at=now,
    )
    factor.secret = encryption.seal(secret, factor.id)
    db.session.add(factor)
    audit.record("factor_enrolled", audit.user_target(who.user_id), {"factor_id": factor.id})
    return {
        "id": factor.id,
        "type": TOTP,
        "friendly_name": friendly_name,
        "totp": {"qr_code": qr_svg(uri), "secret": secret, "uri": uri},
    }


def qr_svg(uri):
    """The QR code of `uri` as SVG text, which the SDKs put after `data:image/svg+xml;utf-8,`."""
    out = io.BytesIO()
    segno.make(uri, error="h").save(
        out, kind="svg", xmldecl=False, svgns=True, svgclass=None, lineclass=None, scale=QR_SCALE
    )
    # In that data: URL a "#" would end the image (the rest is a fragment): name the colour.
    return out.getvalue().decode().replace('stroke="#000"', 'stroke="black"')


# --- challenging and verifying


@transactional
def challenge(who, factor_id, ip):
    """A challenge of one of the caller's factors: its id, type and expiry (unix seconds)."""
    factor = _owned_factor(who.user_id, factor_id)
    if factor.factor_type == mfa_webauthn.WEBAUTHN:
        return mfa_webauthn.challenge(who, factor, ip)
    now = tokens.utcnow()
    row = Challenge(id=str(uuid.uuid4()), factor_id=factor.id, ip_address=ip, created_at=now, attempts=0)
    db.session.add(row)
    factor.last_challenged_at = now
    return {"id": row.id, "type": factor.factor_type, "expires_at": tokens.now() + CHALLENGE_EXPIRY}


def verify(who, factor_id, challenge_id, code, ip, webauthn=None):
    """A code (or a WebAuthn answer) for a challenge of the caller's factor: the session raised to
    aal2, as a new session object."""
    if transactions.read(_factor_type, who.user_id, factor_id) == mfa_webauthn.WEBAUTHN:
        return mfa_webauthn.verify(who, factor_id, challenge_id, webauthn, ip, check_first_verification)
    return transactions.write(_verify_code, who, factor_id, challenge_id, code, ip)


def check_first_verification(who, factor):
    """Verifying a factor not verified yet ends its enrolment and raises the session to aal2: once
    the user has another verified factor, that takes an aal2 session, as enrolling does. Else a
    password alone (aal1) could finish a factor left unverified (a security key whose ceremony was
    cancelled), with the attacker's own authenticator, and reach aal2."""
    if factor.status == VERIFIED:
        return
    others = select(func.count()).where(
        Factor.user_id == who.user_id, Factor.status == VERIFIED, Factor.id != factor.id
    )
    if db.session.execute(others).scalar() and sessions.level(who.session_id) != sessions.AAL2:
        raise APIError(403, Auth.INSUFFICIENT_AAL, "AAL2 required to verify a new factor")


def _factor_type(user_id, factor_id):
    return _owned_factor(user_id, factor_id).factor_type


def _verify_code(who, factor_id, challenge_id, code, ip):
    """A wrong code is counted (and committed) against the challenge."""
    if not code:
        raise validation_failed("Code needs to be non-empty")
    factor = _owned_factor(who.user_id, factor_id)
    check_first_verification(who, factor)
    found = db.session.execute(
        select(Challenge).where(Challenge.id == challenge_id, Challenge.factor_id == factor.id)
    ).scalar_one_or_none()
    if found is None:
        raise APIError(422, Auth.MFA_FACTOR_NOT_FOUND, "MFA factor with the provided challenge ID not found")
    if found.verified_at is not None or found.ip_address != ip:
        raise APIError(422, Auth.MFA_IP_ADDRESS_MISMATCH, "Challenge and verify IP addresses mismatch.")
    if (tokens.utcnow() - found.created_at).total_seconds() > CHALLENGE_EXPIRY:
        db.session.delete(found)
        raise CommitAndRaise(challenge_expired(found.id))
    # Each code takes one of the challenge's attempts, claimed in one statement: racing requests
    # cannot share one, and the claim is committed whatever the code turns out to be.
    claimed = db.session.execute(
        update(Challenge)
        .where(Challenge.id == found.id, Challenge.attempts < MAX_ATTEMPTS)
        .values(attempts=Challenge.attempts + 1)
    ).rowcount
    if not claimed:
        raise APIError(
            422,
            Auth.MFA_CHALLENGE_EXPIRED,
            f"MFA challenge {found.id} has taken too many codes, create a new challenge.",
        )
    secret = encryption.unseal(factor.secret, factor.id)
    step = matching_step(secret, code)
    # The step is recorded by a conditional UPDATE: of two requests with one code, one gets in.
    accepted = (
        step is not None
        and db.session.execute(
            update(Factor)
            .where(Factor.id == factor.id, func.coalesce(Factor.last_step, -1) < step)
            .values(last_step=step)
        ).rowcount
    )
    if hooks.enabled("mfa_verification_attempt"):
        # Asked with no transaction open, once for this verification whatever the unit's retries.
        subject, factor_id, valid = hooks.subject(who.user_id), factor.id, bool(accepted)
        rejected, message = transactions.ask(
            ("mfa_verification_attempt", found.id),
            lambda: hooks.mfa_verification_attempt(subject, factor_id, valid, ip),
        )
        if rejected:  # GoTrue's answer: the user's sessions end, this attempt is refused
            sessions.end(Session.user_id == who.user_id)
            raise CommitAndRaise(APIError(403, Auth.MFA_VERIFICATION_REJECTED, message))
    if not accepted:
        raise CommitAndRaise(APIError(422, Auth.MFA_VERIFICATION_FAILED, "Invalid TOTP code entered"))
    found.verified_at = tokens.utcnow()
    if factor.status != VERIFIED:
        factor.status, factor.updated_at = VERIFIED, tokens.utcnow()
        audit.record("factor_verified", audit.user_target(who.user_id), {"factor_id": factor.id})
        # GoTrue drops the user's other unverified factors of the type once one is verified.
        db.session.execute(
            delete(Factor).where(
                Factor.user_id == who.user_id, Factor.status == UNVERIFIED, Factor.factor_type == TOTP
            )
        )
    if not encryption.is_current(factor.secret):
        factor.secret = encryption.seal(secret, factor.id)  # sealed again under a rotated key
    session = db.session.execute(
        select(Session).where(Session.id == who.session_id).with_for_update()
    ).scalar_one_or_none()
    if session is None:  # logged out while the code was checked
        raise APIError(401, Auth.SESSION_NOT_FOUND, "Session from session_id claim in JWT does not exist")
    return sessions.step_up(session, factor.id)


def challenge_expired(challenge_id):
    return APIError(
        422,
        Auth.MFA_CHALLENGE_EXPIRED,
        f"MFA challenge {challenge_id} has expired, verify against another challenge or create a new "
        "challenge.",
    )


def matching_step(secret, code):
    """The time step whose code `code` is, of the current step and WINDOW either side; else None."""
    totp = pyotp.TOTP(secret, interval=PERIOD)
    sent = code.encode()  # bytes: compare_digest refuses str with non-ASCII characters
    now = tokens.now()
    current = totp.timecode(now)
    for offset in range(-WINDOW, WINDOW + 1):
        if hmac.compare_digest(totp.at(now, counter_offset=offset).encode(), sent):
            return current + offset
    return None


# --- unenrolling


@transactional
def unenroll(who, factor_id):
    """Remove one of the caller's factors; a verified one only from an aal2 session."""
    factor = _owned_factor(who.user_id, factor_id, lock=True)
    if factor.status == VERIFIED and sessions.level(who.session_id) != sessions.AAL2:
        raise APIError(422, Auth.INSUFFICIENT_AAL, "AAL2 required to unenroll verified factor")
    return _remove(factor)


def _remove(factor):
    sessions.step_down(factor.id)
    mfa_webauthn.forget_credential(factor.id)
    db.session.delete(factor)
    audit.record("factor_removed", audit.user_target(factor.user_id), {"factor_id": factor.id})
    return {"id": factor.id}


# --- administration (service_role)


def admin_list_factors(user_id):
    if load_user(user_id) is None:
        raise user_not_found()
    query = select(Factor).where(Factor.user_id == user_id).order_by(Factor.created_at, Factor.id)
    return [factor_object(factor) for factor in db.session.execute(query).scalars()]


@transactional
def admin_delete_factor(user_id, factor_id):
    if load_user(user_id) is None:
        raise user_not_found()
    factor = _owned_factor(user_id, factor_id, lock=True)
    shown = factor_object(factor)
    _remove(factor)
    return shown
