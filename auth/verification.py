"""Redeeming what emails.py mailed: a link token (the link followed, or POST /verify with its
token_hash) or an address's 6-digit code, used up once for a session, or for an auth code when
the link ends a PKCE flow; a wrong code counts against every live token of the address."""

import hmac
from urllib.parse import quote, urlencode

from sqlalchemy import select, update

from auth import accounts, pkce, sessions, tokens
from auth.emails import (
    MAX_WRONG_GUESSES,
    METHODS,
    code_hash,
    keyed_hash,
    otp_expired,
    set_profile,
    token_user,
)
from auth.redirects import redirect_target
from auth.users import is_banned
from database.transactions import CommitAndRaise, transactional
from errors import APIError, user_banned, user_inactive, validation_failed
from extensions import db
from models import users_table
from models.auth import OneTimeToken

# The purposes a `type` of /verify may redeem: `email` is the code of a magic link or a sign-up.
VERIFY_TYPES = {
    "signup": ("signup",),
    "recovery": ("recovery",),
    "magiclink": ("magiclink",),
    "email": ("magiclink", "signup"),
    "email_change": ("email_change",),
    "invite": ("invite",),
}


@transactional
def verify(kind, token_hash=None, email=None, code=None):
    """Redeem a link token (`token_hash`) or an address's code for a session."""
    user_id, purpose = _redeem(kind, token_hash, email, code)
    return sessions.start(user_id)


@transactional
def _follow_link(kind, token):
    """Redeem a mailed link: ("code", an auth code) when the flow it ends is a PKCE one, else
    ("session", a session)."""
    user_id, purpose = _redeem(kind, token)
    flow = pkce.pending(user_id, METHODS[purpose])
    if flow is not None:
        return "code", pkce.issue_code(flow, user_id)
    return "session", sessions.start(user_id)


def _redeem(kind, token_hash=None, email=None, code=None):
    """Use up a link token or a code: (user_id, purpose) of a live one, for an active user."""
    purposes = VERIFY_TYPES.get(kind)
    if purposes is None:
        raise validation_failed(f"type: must be one of {', '.join(VERIFY_TYPES)}")
    now = tokens.utcnow()
    if token_hash:
        found = db.session.execute(
            select(OneTimeToken)
            .where(OneTimeToken.token_hash == keyed_hash(f"link:{token_hash}"))
            .where(OneTimeToken.purpose.in_(purposes))
            .with_for_update()
        ).scalar_one_or_none()
    elif email and code:
        found = _redeem_code(purposes, email, code)
    else:
        raise validation_failed("token_hash, or email and token, are required")
    if found is None or found.expires_at <= now or found.wrong_guesses >= MAX_WRONG_GUESSES:
        raise otp_expired()
    user_id, purpose, address = found.user_id, found.purpose, found.email
    db.session.delete(found)  # single use
    row = token_user(user_id)
    if not row.active:
        raise user_inactive()
    if is_banned(row.banned_until):
        raise user_banned()
    if purpose == "email_change":
        taken = accounts.find_credentials(address)
        if taken is not None and taken.user_id != user_id:
            raise accounts.email_exists()
        users = users_table()
        db.session.execute(update(users).where(users.c.user_id == user_id).values(email=address))
        set_profile(user_id, new_email=None)
    else:  # following any link sent to the address proves it
        set_profile(user_id, unconfirmed=None, confirmed_at=now)
    return user_id, purpose


def _redeem_code(purposes, email, code):
    """The live token whose code `code` is, for `email`; a wrong code counts against every live
    token of the address (kept, though the request fails), and one that reaches MAX_WRONG_GUESSES
    is dead."""
    candidates = (
        db.session.execute(
            select(OneTimeToken)
            .where(OneTimeToken.email == email, OneTimeToken.purpose.in_(purposes))
            .with_for_update()
        )
        .scalars()
        .all()
    )
    for candidate in candidates:
        if hmac.compare_digest(candidate.code_hash, code_hash(candidate.user_id, candidate.purpose, code)):
            return candidate
    for candidate in candidates:
        candidate.wrong_guesses += 1
    raise CommitAndRaise(otp_expired())


def redirect_after_verify(kind, token, redirect_to):
    """GET /verify (the link in the mail): where to send the browser, with the session, or the
    error, in the URL's fragment (never in its query, which servers log)."""
    target = redirect_target(redirect_to)
    try:
        outcome, result = _follow_link(kind, token)
    except APIError as error:
        fragment = {
            "error": "access_denied",
            "error_code": error.error_code,
            "error_description": error.message,
        }
        return f"{target}#{urlencode(fragment, quote_via=quote)}"
    if outcome == "code":
        return with_query(target, code=result)
    return with_fragment(target, result, type=kind)


def with_query(url, **values):
    """`url` with `values` added to its query string (an auth code: harmless without its verifier)."""
    return f"{url}{'&' if '?' in url else '?'}{urlencode(values)}"


def with_fragment(url, session, **values):
    """`url` with a session in its fragment, where browsers keep it from servers and their logs."""
    fragment = {
        "access_token": session["access_token"],
        "expires_at": session["expires_at"],
        "expires_in": session["expires_in"],
        "refresh_token": session["refresh_token"],
        "token_type": "bearer",
        **values,
    }
    return f"{url}#{urlencode(fragment)}"
