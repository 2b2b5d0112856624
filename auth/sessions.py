"""Sessions: starting one at sign-in, the session object and its access token, refreshing (single-use
refresh tokens, a grace interval for racing retries, theft), and ending them."""

import secrets
import uuid
from datetime import UTC

from sqlalchemy import delete, or_, select, update

from auth import audit, hooks, tokens
from auth.users import is_anonymous, is_banned, load_user, user_object
from config import setting
from database import transactions
from database.transactions import CommitAndRaise, transactional
from errors import (
    APIError,
    Auth,
    refresh_token_not_found,
    user_banned,
    user_inactive,
    user_not_found,
    validation_failed,
)
from extensions import db
from models import upsert
from models.auth import Profile, RefreshToken, Session

LOGOUT_SCOPES = ("global", "local", "others")
AAL1, AAL2 = "aal1", "aal2"
TOTP_METHOD = "totp"  # GoTrue's amr method for a TOTP factor
SECOND_FACTORS = (TOTP_METHOD, "webauthn")  # the amr methods a factor adds


# --- starting and shaping


def _new_refresh_token(session_id, parent=None):
    row = RefreshToken(
        token=secrets.token_urlsafe(32),
        session_id=session_id,
        parent=parent,
        revoked=False,
        issued_at=tokens.now(),
        updated_at=tokens.utcnow(),
    )
    db.session.add(row)
    return row


def _open(user_id, method):
    now = tokens.utcnow()
    session = Session(id=str(uuid.uuid4()), user_id=user_id, created_at=now, refreshed_at=now, method=method)
    db.session.add(session)
    db.session.flush()
    return session, _new_refresh_token(session.id)


def start(user_id, method=None):
    """Record the sign-in and open a session: the session object to answer with. `method` is how
    the user signed in, as GoTrue's `amr` names it (None: a password)."""
    upsert(
        Profile.__table__,
        {"user_id": user_id, "last_sign_in_at": tokens.utcnow()},
        ["user_id"],
    )
    session, refresh = _open(user_id, method)
    row = load_user(user_id)
    email = None if is_anonymous(row.email) else row.email  # an anonymous user's address is nobody's
    where = audit.user_target(user_id, email)
    details = {"method": method or "password"}
    audit.record("sign_in", where, details, actor=email or "anonymous", actor_id=user_id)
    session_id = session.id

    def end_the_unanswered_session():
        end(Session.id == session_id)

    transactions.undo_if_a_step_fails(end_the_unanswered_session)
    return session_object(row, session, refresh)


def session_object(row, session, refresh, method=None):
    """GoTrue's session object: a fresh access token, the session's refresh token and the user
    (`row`, from load_user). With the custom_access_token hook on, the token carries the claims it
    approves, or there is no token (the hook's error). `method`: how the token came to be asked
    for, as GoTrue tells the hook (the sign-in's own method by default, token_refresh)."""
    user = user_object(row)
    user_id = row.user_id
    secret = setting("JWT_SECRET")
    claims = {
        "sub": tokens.subject(user_id, setting("UUID_USER_IDS")),
        "email": user["email"],
        "phone": "",
        "session_id": session.id,
        "is_anonymous": user["is_anonymous"],
        "aal": session.aal or AAL1,
        "amr": methods(session),
        "user_metadata": user["user_metadata"],
        "app_metadata": user["app_metadata"],
    }
    payload = tokens.access_claims(claims, setting("JWT_EXPIRY"))
    refresh_token = tokens.refresh_token(
        session.id,
        user_id,
        refresh.token,
        refresh.issued_at,
        secret,
        setting("REFRESH_TOKEN_EXPIRY"),
    )
    answer = {
        "access_token": None,
        "token_type": "bearer",
        "expires_in": setting("JWT_EXPIRY"),
        "expires_at": None,
        "refresh_token": refresh_token,
        "user": user,
    }

    def sign(approved):
        answer["access_token"] = tokens.sign_access_claims(approved, setting("JWT_KEYS"))
        answer["expires_at"] = approved["exp"]

    if not hooks.enabled("custom_access_token"):
        sign(payload)
        return answer
    method = method or claims["amr"][0]["method"]

    def sign_what_the_hook_approves():
        sign(hooks.customize_access_token(claims["sub"], payload, method))

    # Asked once the session is committed, outside the unit of work: no retry asks again, and no
    # connection waits on the hook. Its refusal takes back what the unit made (the undos).
    transactions.after_commit(sign_what_the_hook_approves)
    return answer


def _take_back_rotation(presented, made):
    """Undo a rotation whose new token was never handed out: the new token revoked, the one the
    client still holds valid again."""

    def restore_the_presented_token():
        db.session.execute(update(RefreshToken).where(RefreshToken.token == made).values(revoked=True))
        db.session.execute(update(RefreshToken).where(RefreshToken.token == presented).values(revoked=False))

    transactions.undo_if_a_step_fails(restore_the_presented_token)


def methods(session):
    """The session's amr entries, the most recent first: how the user proved who they are, and when."""
    if session.amr:
        return session.amr
    method = session.method or "password"  # a provider's sign-in records its own (oauth, …)
    return [{"method": method, "timestamp": int(session.created_at.replace(tzinfo=UTC).timestamp())}]


# --- the assurance level (a second factor, auth/mfa.py)


def step_up(session, factor_id, method=TOTP_METHOD):
    """`session` raised to aal2 by `factor_id` just now: its other refresh tokens are revoked and the
    session object, with a new one, answered. The user's aal1 sessions end, as GoTrue does."""
    now = tokens.now()
    others = [entry for entry in methods(session) if entry["method"] not in SECOND_FACTORS]
    session.amr = [{"method": method, "timestamp": now}, *others]
    session.aal, session.factor_id = AAL2, factor_id
    end(
        Session.user_id == session.user_id,
        Session.id != session.id,
        or_(Session.aal.is_(None), Session.aal == AAL1),
    )
    latest = db.session.execute(
        select(RefreshToken.token)
        .where(RefreshToken.session_id == session.id, RefreshToken.revoked.is_(False))
        .order_by(RefreshToken.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    db.session.execute(
        update(RefreshToken)
        .where(RefreshToken.session_id == session.id, RefreshToken.revoked.is_(False))
        .values(revoked=True, updated_at=tokens.utcnow())
    )
    made = _new_refresh_token(session.id, latest)
    if latest is not None:
        _take_back_rotation(latest, made.token)
    return session_object(load_user(session.user_id), session, made)


def step_down(factor_id):
    """The sessions that factor_id raised to aal2 fall back to aal1: the factor is gone."""
    raised = db.session.execute(select(Session).where(Session.factor_id == factor_id)).scalars()
    for session in raised:
        session.aal, session.factor_id = AAL1, None
        session.amr = [entry for entry in methods(session) if entry["method"] not in SECOND_FACTORS]


def level(session_id):
    """The assurance level of a session: aal1 or aal2."""
    return db.session.execute(select(Session.aal).where(Session.id == session_id)).scalar() or AAL1


def start_checked(user_id, method):
    """start() for a sign-in that proved no password (a provider, an auth code): the user must
    still exist, be active and not banned."""
    check_may_sign_in(user_id)
    return start(user_id, method)


def check_may_sign_in(user_id):
    """A 4xx unless the user exists, is active and is not banned."""
    row = load_user(user_id)
    if row is None:
        raise user_not_found()
    refuse_if_locked_out(row)


def refuse_if_locked_out(row):
    """A 400 for a user who may not have a session: deactivated, or banned for now."""
    if not row.active:
        raise user_inactive()
    if is_banned(row.banned_until):
        raise user_banned()


# --- refreshing


@transactional
def refresh(token):
    """Rotate a refresh token: single use, a grace interval (REFRESH_TOKEN_REUSE_INTERVAL) for racing
    retries, and a reuse after it revokes the whole session as theft."""
    try:
        claims = tokens.decode_refresh_token(token, setting("JWT_SECRET"))
    except tokens.TokenError as exc:
        if exc.expired:
            raise APIError(400, Auth.SESSION_EXPIRED, "Invalid Refresh Token: Session Expired") from None
        raise refresh_token_not_found() from None
    now = tokens.utcnow()
    # Locks are taken in one order everywhere, the session's row first (as end() does), so that a
    # refresh racing a logout waits for it instead of deadlocking with it.
    session = db.session.execute(
        select(Session).where(Session.id == claims["sid"]).with_for_update()
    ).scalar_one_or_none()
    if session is None:
        raise refresh_token_not_found()
    # The conditional UPDATE is the lock: of two racing requests exactly one rotates the token.
    rotated = db.session.execute(
        update(RefreshToken)
        .where(RefreshToken.token == claims["jti"], RefreshToken.revoked.is_(False))
        .values(revoked=True, updated_at=now)
    ).rowcount
    row = db.session.execute(
        select(RefreshToken).where(RefreshToken.token == claims["jti"])
    ).scalar_one_or_none()
    if row is None or row.session_id != session.id:
        raise refresh_token_not_found()
    if rotated:
        current = _new_refresh_token(session.id, parent=row.token)
        session.refreshed_at = now
        _take_back_rotation(row.token, current.token)
    else:
        current = _reuse(row, session, now)
    user = load_user(session.user_id)
    if user is None:
        raise refresh_token_not_found()
    refuse_if_locked_out(user)
    return session_object(user, session, current, method="token_refresh")


def _reuse(row, session, now):
    """A revoked token presented again: the current token inside the grace interval, theft after."""
    grace = setting("REFRESH_TOKEN_REUSE_INTERVAL")
    if (now - row.updated_at).total_seconds() <= grace:
        current = db.session.execute(
            select(RefreshToken)
            .where(RefreshToken.session_id == session.id, RefreshToken.revoked.is_(False))
            .order_by(RefreshToken.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        if current is not None:
            return current
    end(Session.id == session.id)
    raise CommitAndRaise(
        APIError(400, Auth.REFRESH_TOKEN_ALREADY_USED, "Invalid Refresh Token: Already Used")
    )


# --- ending


def end(*conditions):
    """Delete the sessions matching `conditions` and their refresh tokens: their tokens die at once.
    The sessions' rows are locked first, in the order a refresh takes its locks."""
    doomed = db.session.execute(select(Session.id).where(*conditions).with_for_update()).scalars().all()
    if doomed:
        db.session.execute(delete(RefreshToken).where(RefreshToken.session_id.in_(doomed)))
        db.session.execute(delete(Session).where(Session.id.in_(doomed)))


@transactional
def sign_out(who, scope):
    """End the caller's session (`local`), their other sessions (`others`) or all of them (`global`)."""
    if scope not in LOGOUT_SCOPES:
        raise validation_failed(f"scope: must be one of {', '.join(LOGOUT_SCOPES)}")
    if scope == "local":
        end(Session.id == who.session_id)
    elif scope == "others":
        end(Session.user_id == who.user_id, Session.id != who.session_id)
    else:
        end(Session.user_id == who.user_id)
