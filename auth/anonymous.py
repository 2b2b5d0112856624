"""Anonymous users (supabase-js `signInAnonymously()`), on when ANONYMOUS_USERS_ENABLED is.

An anonymous user is a row of the users table like any other, so that its id comes from the one
sequence the application sharing the table also uses (no id is ever given twice), and rows of the
application's tables that point at users (a foreign key, an owner column) work from the first
visit. What marks it is its email column: a random address in the reserved `anonymous.invalid`
domain (RFC 2606: no such address can exist), with a password column no password matches. The other
application skips `email LIKE '%@anonymous.invalid'`; minibase never shows that address: the user
object, the token and row policies see an empty email and `is_anonymous: true`.

Converting keeps the row and its id: an address given by `PUT /user` (at once, or once confirmed
with MAILER_AUTOCONFIRM off) or a provider's verified address taken on by linking replaces the
placeholder, and the user is anonymous no more. `purge` deletes anonymous users not seen for a
while, each with a condition that holds only while the row is still anonymous and idle."""

import secrets

from limits import parse as parse_limit
from sqlalchemy import delete, exists, select
from sqlalchemy.exc import IntegrityError

from auth import accounts, audit, sessions, signups, tokens
from auth.passwords import unusable_hash
from auth.users import ANONYMOUS_DOMAIN, is_anonymous
from config import setting
from database import transactions
from database.transactions import transactional
from errors import APIError, Auth
from extensions import db, limiter
from models import users_table
from models.auth import Profile

DOMAIN = ANONYMOUS_DOMAIN
METHOD = "anonymous"  # GoTrue's amr method and provider name for an anonymous sign-in
PURGE_BATCH = 500


def placeholder_email():
    """A fresh address of the reserved domain: unique in the email column, which may demand that."""
    return f"{secrets.token_hex(16)}@{DOMAIN}"


def reserved(email):
    """Whether a client-given address is in the reserved domain (never accepted as anyone's)."""
    return isinstance(email, str) and email.strip().lower().endswith("@" + DOMAIN)


def count_sign_up(ip):
    """A 429 past RATE_LIMIT_ANONYMOUS_USERS sign-ups per hour from one IP (GoTrue's setting)."""
    limit = parse_limit(f"{setting('RATE_LIMIT_ANONYMOUS_USERS')} per hour")
    keys = ("anonymous-sign-up", ip)
    if setting("RATE_LIMITS") and not limiter.limiter.hit(limit, *keys):
        reset = limiter.limiter.get_window_stats(limit, *keys).reset_time
        raise accounts.too_many("Request rate limit reached", reset)


@transactional
def sign_up(data):
    """POST /signup with neither email, phone nor password: a new anonymous user and its session."""
    if setting("DISABLE_SIGNUP"):
        raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
    user_id = signups.create_user(placeholder_email(), None, data, hashed=unusable_hash(), provider=METHOD)
    audit.record("anonymous_sign_up", audit.user_target(user_id), actor="anonymous", actor_id=user_id)
    return sessions.start(user_id, METHOD)


def refuse(who, message="Anonymous user not allowed to perform these actions"):
    """GoTrue's 403 for an anonymous caller on a route for registered users only."""
    if is_anonymous(who.user.email):
        raise APIError(403, Auth.NO_AUTHORIZATION, message)


def check_update(who, fields):
    """An anonymous user sets a password only together with an address (GoTrue's rule)."""
    if is_anonymous(who.user.email) and fields.get("password") and not fields.get("email"):
        raise APIError(
            422,
            Auth.VALIDATION_FAILED,
            "Updating password of an anonymous user without an email or phone is not allowed",
        )


def converted(user_id, email):
    """Record that anonymous user `user_id` now has the address `email` (in the caller's transaction)."""
    audit.record("anonymous_converted", audit.user_target(user_id, email), actor=email, actor_id=user_id)


# --- cleaning up


def purge(older_than):
    """Delete the anonymous users created and last signed in more than `older_than` (a timedelta)
    ago, and what the service keeps of them; (deleted, kept): kept are those the application's
    rows still refer to (a foreign key refused the delete). Each user goes in a transaction of
    its own, and only while still anonymous and idle: a visitor converting or signing in at the
    same moment keeps their account."""
    cutoff = tokens.utcnow() - older_than
    deleted = kept = 0
    after = 0
    while True:
        batch = transactions.read(_candidates, cutoff, after)
        if not batch:
            return deleted, kept
        for user_id in batch:
            try:
                deleted += transactions.write(_purge_one, user_id, cutoff)
            except IntegrityError:
                kept += 1
        after = batch[-1]


def _idle(users, cutoff):
    """The conditions of an anonymous user not seen since `cutoff`."""
    recent = exists().where(Profile.user_id == users.c.user_id, Profile.last_sign_in_at >= cutoff)
    return (users.c.email.like(f"%@{DOMAIN}"), users.c.joined < cutoff, ~recent)


def _candidates(cutoff, after):
    users = users_table()
    query = (
        select(users.c.user_id)
        .where(users.c.user_id > after, *_idle(users, cutoff))
        .order_by(users.c.user_id)
        .limit(PURGE_BATCH)
    )
    return db.session.execute(query).scalars().all()


def _purge_one(user_id, cutoff):
    """1 when user `user_id` was still an idle anonymous user and is gone, with what is kept of them;
    0 when it converted or signed in since it was listed. The row goes first, by its condition: what
    the service keeps of a user who converted meanwhile is never touched."""
    users = users_table()
    gone = db.session.execute(delete(users).where(users.c.user_id == user_id, *_idle(users, cutoff))).rowcount
    if not gone:
        return 0
    accounts.forget(user_id)
    audit.record("user_deleted", audit.user_target(user_id), {"anonymous": True})
    return 1
