"""Who a bearer token belongs to: an API key's role, or a signed-in user whose session is looked up
in the database on every request, so that a session ended on any instance is refused at once."""

import hmac
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import bindparam, select

from auth import tokens
from auth.users import factor_object, is_banned, user_columns
from config import setting
from database import statements
from errors import APIError, Auth, bad_jwt, user_banned, user_inactive, user_not_found
from extensions import db, state
from models import users_table
from models.auth import Factor, Profile, Session
from models.auth import Identity as LinkedIdentity  # a provider identity; Identity here is the caller


@dataclass(frozen=True)
class Identity:
    """The caller of one request, as the services see it."""

    role: str  # anon | authenticated | service_role
    user_id: int | None = None
    session_id: str | None = None
    user: object = None  # the user and profile row (auth.users.load_user's shape) of a signed-in caller
    aal: str | None = None  # the session's assurance level: aal1, or aal2 after a second factor
    expires_at: int | None = None  # the access token's exp: when a connection it opened must end


SECRET_KEY_PREFIX = "sb_secret_"
OPAQUE_KEY_PREFIX = "sb_"


def api_key_role(key, keys=None):
    """anon or service_role for a valid API key, else None: a JWT key (anon or service_role,
    signed with JWT_SECRET or one of JWT_SIGNING_KEYS; `keys` is JWT_KEYS when the caller has it at
    hand) or one of PUBLISHABLE_KEYS (anon) and SECRET_KEYS (service_role)."""
    if key.startswith(OPAQUE_KEY_PREFIX):
        return opaque_key_role(key)
    return tokens.api_key_role(key, setting("JWT_KEYS") if keys is None else keys)


def opaque_key_role(key):
    """The role of a listed sb_publishable_/sb_secret_ key, or None. Every listed key is compared,
    in constant time, whatever matched: the answer's timing tells nothing about any key."""
    presented = key.encode()
    role = None
    for keys, key_role in ((setting("PUBLISHABLE_KEYS"), "anon"), (setting("SECRET_KEYS"), "service_role")):
        for listed in keys.values():
            if hmac.compare_digest(presented, listed.encode()):
                role = key_role
    return role


def is_secret_key(key):
    return key.startswith(SECRET_KEY_PREFIX)


# What factor_object shows of a factor (never its secret).
FACTOR_COLUMNS = (
    "id",
    "friendly_name",
    "factor_type",
    "status",
    "created_at",
    "updated_at",
    "last_challenged_at",
)


def identify(token):
    """The identity behind a bearer token; a 401 when it is bad, expired, logged out or its user gone."""
    role = api_key_role(token)
    if role is not None:
        return Identity(role)
    claims = _claims(token)
    # A read of its own, prepared once and ended at once, on a pooled connection: no ORM session for
    # a request that needs none (GET /user), and a write that follows starts its transaction at its
    # first statement.
    found = statements.prepared({"session_id": claims["session_id"]}, prepared_session_user()[0])[0]
    return _signed_in(claims, found[0] if found else None)


def identify_all(bearers):
    """{token: its Identity, or the APIError identify raises for it} for each of `bearers`, judged
    as identify judges one, with one read for all their sessions (Realtime checks every subscriber's
    token again before it hands out a change)."""
    judged, claims = {}, {}
    for token in bearers:
        # An access token first: its check is remembered for a thousand tokens, where an API key's
        # remembers 256, so a thousand users' tokens tried as keys first were decoded each time.
        try:
            claims[token] = _claims(token)
        except APIError as exc:
            role = api_key_role(token)
            judged[token] = exc if role is None else Identity(role)
    if claims:
        wanted = sorted({found["session_id"] for found in claims.values()})
        query = (
            _session_user().add_columns(Session.id.label("minibase_session")).where(Session.id.in_(wanted))
        )
        with db.engine.connect() as connection:
            rows = {row.minibase_session: row for row in connection.execute(query)}
        for token, found in claims.items():
            try:
                judged[token] = _signed_in(found, rows.get(found["session_id"]))
            except APIError as exc:
                judged[token] = exc
    return judged


def _claims(token):
    try:
        return tokens.decode_access_token(token, setting("JWT_KEYS"))
    except tokens.TokenError as exc:
        raise (bad_jwt(message="Token has expired") if exc.expired else bad_jwt(exc.cause)) from None


def _signed_in(claims, row):
    """The Identity of a verified token's `claims`, whose session and user are `row` (None: no such
    session); a 401 when the session is gone or not the token's user's, or the user gone or banned."""
    if row is None:
        raise APIError(401, Auth.SESSION_NOT_FOUND, "Session from session_id claim in JWT does not exist")
    if row.session_user != tokens.user_id_of(claims["sub"]):
        raise bad_jwt("its session is another user's")
    if row.user_id is None:
        raise user_not_found(401)
    if not row.active:
        raise user_inactive(401)
    if is_banned(row.banned_until):  # a ban through the API ends the sessions; one made in SQL does not
        raise user_banned(401)
    return Identity("authenticated", row.user_id, claims["session_id"], row, row.session_aal, claims["exp"])


def signing_session(user_id, session_id):
    """User `user_id` as the caller, in session `session_id`, for what they signed in it earlier (a
    signed upload URL): their current profile, app_metadata and assurance level; None when that
    session has ended (logout, ban, a password change elsewhere, deletion) or is another user's, or
    the user is gone, inactive or banned. A URL lives no longer than the session that signed it, as
    that session's access tokens do, so a user deleted and another given their id inherits none."""
    if not isinstance(session_id, str):
        return None
    found = statements.prepared({"session_id": session_id}, prepared_session_user()[0])[0]
    row = found[0] if found else None
    if row is None or row.session_user != user_id or row.user_id is None:
        return None
    if not row.active or is_banned(row.banned_until):
        return None
    return Identity("authenticated", row.user_id, session_id, row, row.session_aal)


def factors_and_identities(who):
    """The signed-in caller's factor objects and identity rows, for the user object GET /user
    answers with: prepared too, and run only for a user who has any (the bearer check's row says
    so), so that GET /user is one statement for everyone else."""
    if not who.user.has_links:
        return [], []
    factors, linked = statements.prepared({"session_id": who.session_id}, *prepared_session_user()[1:])
    return [factor_object(factor) for factor in factors], list(linked)


def prepared_session_user():
    """A session (with its assurance level) and its user with the profile /auth/v1/user answers with,
    and whether the user has factors or linked identities (two index probes), which every bearer
    token runs; and those factors (not their secrets) and identities, which GET /user adds when there
    are any. Prepared once per users table (database.statements.prepare)."""
    cache, users = state(), users_table()
    if cache.session_user is None or cache.session_user[0] is not users:
        query = _session_user().where(Session.id == bindparam("session_id", required=True))
        factors = (
            select(*(getattr(Factor, name) for name in FACTOR_COLUMNS))
            .join(Session, Session.user_id == Factor.user_id)
            .where(Session.id == bindparam("session_id", required=True))
            .order_by(Factor.created_at, Factor.id)
        )
        linked = (
            select(LinkedIdentity)
            .join(Session, Session.user_id == LinkedIdentity.user_id)
            .where(Session.id == bindparam("session_id", required=True))
            .order_by(LinkedIdentity.created_at)
        )
        prepared = tuple(statements.prepare(statement, db.engine) for statement in (query, factors, linked))
        cache.session_user = (users, prepared)
    return cache.session_user[1]


def _session_user():
    """Sessions with their assurance level and their users with the profile, and whether the user has
    factors or linked identities: what a bearer token's check reads, for the sessions a WHERE names."""
    users = users_table()
    has_links = sa.or_(
        sa.exists().where(Factor.user_id == Session.user_id),
        sa.exists().where(LinkedIdentity.user_id == Session.user_id),
    )
    return (
        select(
            Session.user_id.label("session_user"),
            sa.func.coalesce(Session.aal, "aal1").label("session_aal"),
            has_links.label("has_links"),
            *user_columns(),
        )
        .select_from(Session)
        .outerjoin(users, users.c.user_id == Session.user_id)
        .outerjoin(Profile, Profile.user_id == Session.user_id)
    )
