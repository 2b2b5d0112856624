"""Who is calling: the API key every /auth/v1 and /rest/v1 request must carry, and the user behind a
bearer token."""

import functools
from dataclasses import dataclass

from flask import current_app, g, request
from sqlalchemy import bindparam, select

from auth import tokens
from database import transactions
from errors import APIError, Auth, bad_jwt, no_authorization, user_inactive, user_not_found
from extensions import db, state
from models import Profile, Session, user_columns, users_table

PROTECTED_PREFIXES = ("/auth/v1", "/rest/v1")


@dataclass(frozen=True)
class Identity:
    role: str  # anon | authenticated | service_role
    user_id: int | None = None
    session_id: str | None = None
    user: object = None  # the user and profile row (models.load_user's shape) of a signed-in caller


def secret():
    return current_app.config["JWT_SECRET"]


def require_api_key():
    """before_request: every /auth/v1 and /rest/v1 request carries a valid key, as at Supabase's gateway."""
    if not request.path.startswith(PROTECTED_PREFIXES) or request.method == "OPTIONS":
        return
    key = request.headers.get("apikey") or request.args.get("apikey")
    if not key:
        raise APIError(
            401,
            Auth.NO_API_KEY,
            "No API key found in request",
            hint="No `apikey` request header or url param was found.",
            api="rest",
        )
    role = tokens.api_key_role(key, secret())
    if role is None:
        raise APIError(
            401, Auth.INVALID_API_KEY, "Invalid API key", hint="Double check your apikey.", api="rest"
        )
    g.api_key_role = role


def bearer_token():
    """The token of `Authorization: Bearer <token>`, None without the header; a 401 when it is malformed."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise no_authorization()
    return token


def identity():
    """The caller: a signed-in user when a valid access token is presented, else the API key's role."""
    if "identity" not in g:
        token = bearer_token()
        g.identity = Identity(g.api_key_role) if token is None else identify(token)
    return g.identity


def identify(token):
    """The identity behind a bearer token; a 401 when it is bad, expired, logged out or its user gone."""
    role = tokens.api_key_role(token, secret())
    if role is not None:
        return Identity(role)
    try:
        claims = tokens.decode_access_token(token, secret())
    except tokens.TokenError as exc:
        raise (bad_jwt("Token has expired") if exc.expired else bad_jwt()) from None
    # A read of its own, prepared once and ended at once, on a pooled connection: no ORM session for
    # a request that needs none (GET /user), and a write that follows starts its transaction at its
    # first statement.
    found = transactions.prepared({"session_id": claims["session_id"]}, prepared_session_user())[0]
    row = found[0] if found else None
    if row is None:
        raise APIError(401, Auth.SESSION_NOT_FOUND, "Session from session_id claim in JWT does not exist")
    if str(row.session_user) != claims["sub"]:
        raise bad_jwt()
    if row.user_id is None:
        raise user_not_found(401)
    if not row.active:
        raise user_inactive(401)
    return Identity("authenticated", row.user_id, claims["session_id"], row)


def prepared_session_user():
    """One round trip: a session, and its user with the profile /auth/v1/user answers with. Prepared
    once per users table (database.transactions.prepare): every bearer token runs it."""
    cache, users = state(), users_table()
    if cache.session_user is None or cache.session_user[0] is not users:
        query = (
            select(Session.user_id.label("session_user"), *user_columns())
            .select_from(Session)
            .outerjoin(users, users.c.user_id == Session.user_id)
            .outerjoin(Profile, Profile.user_id == Session.user_id)
            .where(Session.id == bindparam("session_id", required=True))
        )
        cache.session_user = (users, transactions.prepare(query, db.engine))
    return cache.session_user[1]


def current_user_identity():
    """A signed-in user, or the 401 the auth API gives when there is none (an API key is no user)."""
    if bearer_token() is None:
        raise no_authorization()
    who = identity()
    if who.user_id is None:
        raise bad_jwt("Invalid JWT: an API key is not a user's token")
    return who


def requires_user(view):
    """A view for signed-in users only; it gets the caller's Identity as `who`."""

    @functools.wraps(view)
    def wrapped(**kwargs):
        return view(who=current_user_identity(), **kwargs)

    return wrapped
