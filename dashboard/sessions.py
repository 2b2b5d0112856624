"""Dashboard sign-ins. An administrator (app_metadata.role = "admin") signs in through the auth API's
own password sign-in, so that failures count toward its lockout; the session it opens carries the
dashboard's cookie, whose token is kept only as a hash. Ending that session (sign-out, a ban, "Sign
out everywhere", a password change) ends the cookie: every request looks both up, and checks again
that the user is still an active, unbanned administrator, past the second factor if they have one."""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select

from auth import accounts, audit, mfa, mfa_webauthn, sessions, signins, tokens
from auth.identity import Identity
from auth.users import is_banned, load_user
from config import setting
from database import transactions
from database.transactions import CommitAndRaise, transactional
from errors import APIError, Auth, invalid_credentials
from extensions import db
from models.auth import DashboardSession, Factor, Session

LIFETIME = timedelta(hours=12)
ADMIN_ROLE = "admin"
MAX_TOKEN = 128  # a cookie longer than any token made here is not looked up


@dataclass(frozen=True)
class Admin:
    """The administrator of one dashboard request."""

    user_id: int
    email: str
    session_id: str
    csrf: str
    verified: bool  # past the second factor, or has none


def is_admin(app_metadata):
    return isinstance(app_metadata, dict) and app_metadata.get("role") == ADMIN_ROLE


def _hash(token):
    return hashlib.sha256(token.encode()).hexdigest()


def sign_in(email, password, ip):
    """(cookie token, whether a code is still asked for) for an administrator's right password. Any
    other answer is the auth API's own: a wrong password is counted toward its lockout. A user who
    is no administrator gets the wrong password's answer, and the session their sign-in opened is
    ended at once."""
    session = signins.sign_in(email, password, ip)
    claims = tokens.decode_access_token(session["access_token"], setting("JWT_KEYS"))
    return transactions.write(_open, email, claims, session["user"])


def _open(email, claims, user):
    user_id = tokens.user_id_of(claims["sub"])
    if not is_admin(user["app_metadata"]):
        sessions.end(Session.id == claims["session_id"])
        audit.record("dashboard_refused", email, {"reason": "not an admin"}, actor=email, actor_id=user_id)
        raise CommitAndRaise(invalid_credentials())
    now = tokens.utcnow()
    db.session.execute(delete(DashboardSession).where(DashboardSession.expires_at < now))
    token = secrets.token_urlsafe(32)
    needs_code = bool(_verified_factors(user_id))
    db.session.add(
        DashboardSession(
            token_hash=_hash(token),
            session_id=claims["session_id"],
            user_id=user_id,
            csrf=secrets.token_urlsafe(32),
            verified=not needs_code,
            created_at=now,
            expires_at=now + LIFETIME,
        )
    )
    return token, needs_code


def _verified_factors(user_id, factor_type=None):
    """The user's verified factors (any of which makes the dashboard ask for a second factor), or
    those of one type: TOTP ones answer the code form, WebAuthn ones the security key button."""
    query = select(Factor.id).where(Factor.user_id == user_id, Factor.status == mfa.VERIFIED)
    if factor_type is not None:
        query = query.where(Factor.factor_type == factor_type)
    return db.session.execute(query.order_by(Factor.created_at, Factor.id)).scalars().all()


def second_steps(admin):
    """(whether the admin has a TOTP factor, whether a WebAuthn one): what the second step offers."""
    codes = transactions.read(_verified_factors, admin.user_id, mfa.TOTP)
    keys = transactions.read(_verified_factors, admin.user_id, mfa_webauthn.WEBAUTHN)
    return bool(codes), bool(keys)


def no_code_factor():
    message = "Your second factor is a security key or passkey: use it, as no code can be checked."
    return APIError(403, Auth.MFA_FACTOR_NOT_FOUND, message)


def no_key_factor():
    return APIError(403, Auth.MFA_FACTOR_NOT_FOUND, "You have no security key or passkey factor.")


def current(token):
    """The Admin whose cookie `token` is, or None: unknown, expired, its session ended, or its user
    gone, deactivated, banned or no longer an administrator."""
    if not token or len(token) > MAX_TOKEN:
        return None
    return transactions.read(_current, _hash(token))


def _current(token_hash):
    found = db.session.execute(
        select(DashboardSession)
        .join(Session, Session.id == DashboardSession.session_id)
        .where(DashboardSession.token_hash == token_hash)
    ).scalar_one_or_none()
    if found is None or found.expires_at <= tokens.utcnow():
        return None
    user = load_user(found.user_id)
    if user is None or not user.active or is_banned(user.banned_until) or not is_admin(user.app_metadata):
        return None
    return Admin(found.user_id, user.email, found.session_id, found.csrf, found.verified)


def csrf_matches(admin, sent):
    return isinstance(sent, str) and hmac.compare_digest(sent.encode(), admin.csrf.encode())


def verify_code(admin, code, ip):
    """The admin's TOTP code, checked by the auth API's MFA service against their first verified
    factor: the session rises to aal2 and the cookie lets them in. Each code is an attempt counted
    toward the sign-in lockout first, as a password is, and taken back when it is right. Without a
    TOTP factor no code can be right: refused before anything is counted or challenged."""
    if not second_steps(admin)[0]:
        raise no_code_factor()
    failures = transactions.write(_count_attempt, admin, ip)
    transactions.write(_check_code, admin, (code or "").strip(), ip, failures)


def _count_attempt(admin, ip):
    failures = signins.FailedSignIns(admin.email, accounts.find_credentials(admin.email), ip)
    failures.reserve()
    return failures


def _check_code(admin, code, ip, failures):
    factors = _verified_factors(admin.user_id, mfa.TOTP)
    if not factors:  # removed since the check before counting
        raise no_code_factor()
    who = _caller(admin)
    challenge = mfa.challenge(who, factors[0], ip)
    try:
        mfa.verify(who, factors[0], challenge["id"], code, ip)
    except (CommitAndRaise, APIError) as refused:
        _record_failure(admin, failures)
        raise CommitAndRaise(refused.error if isinstance(refused, CommitAndRaise) else refused) from None
    _passed(admin, failures)


def _caller(admin):
    """The administrator as the auth API's MFA service sees a caller: their aal1 session."""
    return Identity("authenticated", admin.user_id, admin.session_id, load_user(admin.user_id), sessions.AAL1)


def _record_failure(admin, failures):
    audit.record("sign_in_failed", admin.email, {"second_factor": True}, admin.email, admin.user_id)
    if failures.exhausted():
        audit.record("lockout", admin.email, {"second_factor": True}, admin.email, admin.user_id)


def _passed(admin, failures):
    failures.release()
    db.session.execute(
        DashboardSession.__table__.update()
        .where(DashboardSession.session_id == admin.session_id)
        .values(verified=True)
    )


def key_options(admin, ip):
    """A challenge of the admin's first WebAuthn factor, by the auth API's MFA service:
    {factor_id, challenge_id, options} (request options for navigator.credentials.get())."""
    factors = transactions.read(_verified_factors, admin.user_id, mfa_webauthn.WEBAUTHN)
    if not factors:
        raise no_key_factor()
    challenged = transactions.write(mfa.challenge, _caller(admin), factors[0], ip)
    options = challenged["webauthn"]["credential_options"]["publicKey"]
    return {"factor_id": factors[0], "challenge_id": challenged["id"], "options": options}


def verify_key(admin, factor_id, challenge_id, credential, ip):
    """The key's assertion for a challenge key_options gave, checked by the auth API's MFA service
    (single use, this admin's factor, its sign counter, the RP's origins): the session rises to aal2
    and the cookie lets them in. Counted toward the sign-in lockout as a code is. The verification
    commits on its own (the challenge is used up whatever it concludes), so it runs outside a unit."""
    if not second_steps(admin)[1]:
        raise no_key_factor()
    failures = transactions.write(_count_attempt, admin, ip)
    answer = {"type": mfa_webauthn.REQUEST, "credential_response": credential}
    try:
        mfa.verify(_caller(admin), factor_id, challenge_id, None, ip, webauthn=answer)
    except APIError:
        transactions.write(_record_failure, admin, failures)
        raise
    transactions.write(_passed, admin, failures)


@transactional
def sign_out(admin):
    """End the cookie and the auth session under it: a copy of the cookie is worth nothing after."""
    db.session.execute(delete(DashboardSession).where(DashboardSession.session_id == admin.session_id))
    sessions.end(Session.id == admin.session_id)
    audit.record("sign_out", audit.user_target(admin.user_id, admin.email))
