"""Making users: every way a user is made (sign-up, an e-mail flow's, a provider's first sign-in, an
administrator's) comes through create_user, one row per address however many race, the
before_user_created hook asked outside the unit of work; and POST /signup."""

import hashlib

from sqlalchemy import delete, exists, insert, or_, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from auth import hooks, sessions, tokens
from auth.accounts import (
    check_lengths,
    check_password_strength,
    find_credentials,
    forget,
    refuse_a_broken_rule,
    split_metadata,
)
from auth.passwords import hash_password
from config import setting
from database import transactions
from database.transactions import transactional
from errors import APIError, Auth
from extensions import db, state
from models import required_without_default, upsert, users_table
from models.auth import (
    Factor,
    FlowState,
    Identity,
    OneTimeToken,
    Profile,
    Session,
    SignUpLock,
    WebAuthnCredential,
)
from models.storage import StorageObject, StorageUpload


def has_leftovers(user_id):
    """Whether the service's tables keep anything of a user `user_id`: a plain read, which locks
    nothing (deletes of rows that are not there would lock the gaps concurrent sign-ups insert in)."""
    kept = [
        exists().where(model.user_id == user_id)
        for model in (Session, Profile, Factor, Identity, OneTimeToken, WebAuthnCredential)
    ]
    kept.append(exists().where(or_(FlowState.user_id == user_id, FlowState.link_user_id == user_id)))
    kept += [exists().where(model.owner == str(user_id)) for model in (StorageObject, StorageUpload)]
    return db.session.execute(select(or_(*kept))).scalar()


def proposed_user(email, data, provider):
    """The user object a before_user_created hook sees: GoTrue's shape, without an id yet. An
    anonymous user has no address and no provider, as at GoTrue."""
    now = tokens.utcnow().isoformat() + "Z"
    anonymous = provider == "anonymous"
    return {
        "id": None,
        "aud": "authenticated",
        "role": "authenticated",
        "email": "" if anonymous else email,
        "phone": "",
        "app_metadata": {} if anonymous else {"provider": provider, "providers": [provider]},
        "user_metadata": {key: value for key, value in data.items() if value is not None},
        "identities": [],
        "created_at": now,
        "updated_at": now,
        "is_anonymous": anonymous,
    }


def one_sign_up_at_a_time(email):
    """Where no unique index on the users table's email guards it, hold a lock row for `email` until
    this transaction ends: a racing sign-up of the same address waits (or, on another Galera node,
    is refused at commit and runs again), then finds the user."""
    users_table()
    if state().email_is_unique:
        return
    # INSERT … ON DUPLICATE KEY UPDATE takes the row's exclusive lock at once, where a plain INSERT
    # of a duplicate waits for a shared one first: three racing sign-ups could then deadlock.
    key = hashlib.sha256(email.encode()).hexdigest()
    upsert(SignUpLock.__table__, {"email_key": key}, ["email_key"])
    # Deleted again at once, the lock held until the end all the same: a row that stayed would make
    # the next upsert of the address change nothing, and a change is what a Galera cluster certifies.
    # An insert and a delete are two changes of the key: racing sign-ups on two nodes conflict.
    db.session.execute(delete(SignUpLock).where(SignUpLock.email_key == key))


def user_already_exists():
    return APIError(422, Auth.USER_ALREADY_EXISTS, "User already registered")


def create_user(email, password, data, hashed=None, provider="email"):
    """Insert a user (bcrypt hash, active=1, joined=now) and their profile; the new user_id. A user
    made by a provider comes with `hashed`, a hash no password matches, instead of a password.
    Every way a user is made comes here, so the before_user_created hook sees (and may veto) each."""
    if hashed is None:
        check_password_strength(password)
    columns, about, extra = split_metadata(data)
    one_sign_up_at_a_time(email)
    if find_credentials(email) is not None:
        raise user_already_exists()
    if hooks.enabled("before_user_created"):  # asked with no transaction open, once per unit
        proposed = proposed_user(email, data, provider)
        transactions.ask(("before_user_created", email), lambda: hooks.before_user_created(proposed))
    users = users_table()
    for name in required_without_default(users):
        if columns.get(name) is None:
            columns[name] = ""
    check_lengths({**columns, "email": email}, about)
    now = tokens.utcnow()
    values = {
        **columns,
        "email": email,
        "password": hashed or hash_password(password, setting("BCRYPT_ROUNDS")),
        "active": 1,
        "joined": now,
    }
    try:
        user_id = db.session.execute(insert(users).values(values)).inserted_primary_key[0]
    except DBAPIError as exc:
        refuse_a_broken_rule(exc)
        if not isinstance(exc, IntegrityError):
            raise
        raise user_already_exists() from None
    if has_leftovers(user_id):  # of an earlier user with this id, deleted by another program
        forget(user_id)
    profile = {"user_id": user_id, "about": about, "extra": extra or None, "updated_at": now}
    upsert(Profile.__table__, profile, ["user_id"])

    def take_back_the_new_user():
        withdraw(user_id)

    transactions.undo_if_a_step_fails(take_back_the_new_user)
    return user_id


def withdraw(user_id):
    """Delete a user made for a request that then failed after its commit (its token refused by
    the custom_access_token hook, its mail not sent), unless somebody has signed in as them since:
    the request answers as though it had made nobody."""
    if db.session.execute(select(Session.id).where(Session.user_id == user_id).limit(1)).first():
        return
    users = users_table()
    forget(user_id)
    db.session.execute(delete(users).where(users.c.user_id == user_id))


@transactional
def sign_up(email, password, data):
    if setting("DISABLE_SIGNUP"):
        raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
    user_id = create_user(email, password, data)
    return sessions.start(user_id)
