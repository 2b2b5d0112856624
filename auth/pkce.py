"""PKCE (RFC 7636) as GoTrue does it: a flow started with a `code_challenge` ends in a redirect
carrying `?code=<auth code>` instead of a session, and the client that holds the verifier exchanges
the code for the session (`POST /token?grant_type=pkce`).

The flow's row holds the challenge; its auth code is stored only as a keyed hash, lives
AUTH_CODE_LIFETIME, and is single use: an exchange that fails on a wrong verifier burns it too."""

import base64
import hashlib
import hmac
import re
import uuid
from datetime import timedelta

from sqlalchemy import delete, select

from auth import sessions, tokens
from config import setting
from database.transactions import CommitAndRaise, transactional
from errors import APIError, Auth, validation_failed
from extensions import db
from models.auth import FlowState

AUTH_CODE_LIFETIME = timedelta(minutes=5)
FLOW_LIFETIME = timedelta(hours=1)  # the least a flow waits: for a provider's redirect, or a mailed link


def flow_lifetime():
    """How long a flow waits for its link or redirect: an hour, or OTP_EXPIRY when a mailed link
    lives longer (its flow must outlive it, or the link would end in a session, not a code)."""
    return max(FLOW_LIFETIME, timedelta(seconds=setting("OTP_EXPIRY")))


METHODS = ("s256", "plain")
CHALLENGE = re.compile(r"[A-Za-z0-9._~-]{43,128}\Z")


def challenge(code_challenge, code_challenge_method):
    """(challenge, method) of a request that starts a PKCE flow, None for one that does not, or the
    400 GoTrue gives: both or neither, the method `s256` or `plain` in any case, RFC 7636's
    alphabet and length."""
    if not code_challenge and not code_challenge_method:
        return None
    if not code_challenge or not code_challenge_method:
        raise validation_failed("PKCE flow requires code_challenge_method and code_challenge")
    method = str(code_challenge_method).lower()
    if method not in METHODS:
        raise validation_failed("Invalid code_challenge_method")
    if not isinstance(code_challenge, str) or not CHALLENGE.match(code_challenge):
        raise validation_failed(
            "code challenge has to be between 43 and 128 characters of letters, digits, "
            "hyphens, periods, underscores and tildes"
        )
    return code_challenge, method


def start(pkce, method, provider="email", user_id=None, **values):
    """A flow row for a PKCE challenge (None: the implicit flow, nothing to keep), not committed."""
    if pkce is None:
        return None
    flow = FlowState(
        id=str(uuid.uuid4()),
        user_id=user_id,
        method=method,
        provider=provider,
        code_challenge=pkce[0],
        code_challenge_method=pkce[1],
        created_at=tokens.utcnow(),
        **values,
    )
    db.session.add(flow)
    return flow


def pending(user_id, method):
    """The newest PKCE flow of (user, method) whose code is not issued yet, or None."""
    return db.session.execute(
        select(FlowState)
        .where(
            FlowState.user_id == user_id,
            FlowState.method == method,
            FlowState.code_challenge.is_not(None),
            FlowState.auth_code_hash.is_(None),
            FlowState.created_at > tokens.utcnow() - flow_lifetime(),
        )
        .order_by(FlowState.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()


def issue_code(flow, user_id):
    """The auth code that ends `flow` for `user_id` (not committed); only its hash is kept."""
    code = str(uuid.uuid4())  # GoTrue's codes are UUIDs; the SDKs pass them on untouched
    flow.user_id = user_id
    flow.auth_code_hash = _code_hash(code)
    flow.auth_code_issued_at = tokens.utcnow()
    return code


def _code_hash(code):
    return tokens.keyed_hash(f"auth_code:{code}", setting("JWT_SECRET"))


def _verifies(flow, verifier):
    if flow.code_challenge_method == "s256":
        digest = hashlib.sha256(verifier.encode()).digest()
        expected = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    else:
        expected = verifier
    return hmac.compare_digest(expected.encode(), flow.code_challenge.encode())


@transactional
def exchange(auth_code, code_verifier):
    """POST /token?grant_type=pkce: the session an auth code stands for, once."""
    if not auth_code or not code_verifier:
        raise validation_failed("invalid request: both auth code and code verifier should be non-empty")
    flow = db.session.execute(
        select(FlowState).where(FlowState.auth_code_hash == _code_hash(auth_code)).with_for_update()
    ).scalar_one_or_none()
    if flow is None or flow.user_id is None:
        raise APIError(400, Auth.FLOW_STATE_NOT_FOUND, "invalid flow state, no valid flow state found")
    db.session.delete(flow)  # single use, whatever happens next
    if flow.auth_code_issued_at + AUTH_CODE_LIFETIME <= tokens.utcnow():
        raise CommitAndRaise(
            APIError(400, Auth.FLOW_STATE_EXPIRED, "invalid flow state, flow state has expired")
        )
    if not _verifies(flow, code_verifier):
        raise CommitAndRaise(
            APIError(
                400, Auth.BAD_CODE_VERIFIER, "code challenge does not match previously saved code verifier"
            )
        )
    return sessions.start_checked(flow.user_id, flow.method)


def sweep():
    """Forget flows nobody finished (not committed)."""
    db.session.execute(delete(FlowState).where(FlowState.created_at < tokens.utcnow() - flow_lifetime()))
