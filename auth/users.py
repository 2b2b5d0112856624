"""A user as the auth API shows one: the users table's row and the service's profile of it, read in
one query, and GoTrue's user object made of them (never the password hash)."""

import functools
import uuid

from sqlalchemy import select

from auth import tokens
from auth.passwords import UNUSABLE_PREFIX
from extensions import db
from models import METADATA_COLUMNS, users_table
from models.auth import Factor, Identity, Profile

ANONYMOUS_DOMAIN = "anonymous.invalid"  # RFC 2606: no real address is in it


def user_columns():
    """What a user object is made of: the users table's columns (never the hash) and the profile's."""
    users = users_table()
    return [
        users.c.user_id,
        users.c.email,
        users.c.username,
        users.c.first_name,
        users.c.last_name,
        users.c.active,
        users.c.joined,
        # Whether the password hash is one that can never verify (a user made by a provider): the
        # hash itself never leaves the database.
        users.c.password.like(f"{UNUSABLE_PREFIX}%").label("external_only"),
        Profile.about,
        Profile.extra,
        Profile.updated_at,
        Profile.last_sign_in_at,
        Profile.banned_until,
        Profile.app_metadata,
        Profile.unconfirmed,
        Profile.confirmation_sent_at,
        Profile.confirmed_at,
        Profile.recovery_sent_at,
        Profile.new_email,
        Profile.email_change_sent_at,
        Profile.invited_at,
    ]


def user_query():
    """Users with their profiles."""
    users = users_table()
    return select(*user_columns()).outerjoin(Profile, Profile.user_id == users.c.user_id)


def load_user(user_id):
    """The user and their profile as one row, or None."""
    users = users_table()
    return db.session.execute(user_query().where(users.c.user_id == user_id)).first()


def is_banned(banned_until):
    """Whether a ban ending at `banned_until` (naive UTC, or None) is still on."""
    return banned_until is not None and banned_until > tokens.utcnow()


def timestamp(value):
    return _formatted(value) if value is not None else None


# A user object shows the same few instants on every GET /user (created, confirmed, signed in), and
# strftime is a tenth of that request: each is formatted once.
@functools.lru_cache(maxsize=4096)
def _formatted(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.lru_cache(maxsize=4096)
def email_identity_id(user_id):
    """The identity_id of a user's e-mail identity: a UUID of their id, the same on every read."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"minibase:email:{user_id}"))


def factor_object(factor):
    """GoTrue's factor object: never the secret."""
    return {
        "id": factor.id,
        "friendly_name": factor.friendly_name,
        "factor_type": factor.factor_type,
        "status": factor.status,
        "created_at": timestamp(factor.created_at),
        "updated_at": timestamp(factor.updated_at),
        "last_challenged_at": timestamp(factor.last_challenged_at),
    }


def identities_of(user_ids):
    """{user_id: [their rows of minibase_identities, oldest first]} of the given users (who have any)."""
    found = {}
    if user_ids:
        query = select(Identity).where(Identity.user_id.in_(user_ids)).order_by(Identity.created_at)
        for identity in db.session.execute(query).scalars():
            found.setdefault(identity.user_id, []).append(identity)
    return found


def factors_of(user_ids):
    """{user_id: [factor objects, oldest first]} of the given users (who have any)."""
    found = {}
    if user_ids:
        query = select(Factor).where(Factor.user_id.in_(user_ids)).order_by(Factor.created_at, Factor.id)
        for factor in db.session.execute(query).scalars():
            found.setdefault(factor.user_id, []).append(factor_object(factor))
    return found


def user_object(row, factors=None, linked=None):
    """GoTrue's user object for a row of user_query; `id` is the integer user_id. `factors`: the
    user's factor objects, read here when not given (a list of users reads them all at once);
    `linked`: the user's rows of minibase_identities, likewise."""
    if factors is None:
        factors = factors_of([row.user_id]).get(row.user_id, [])
    anonymous = is_anonymous(row.email)
    # The profile columns a user has filled in: GoTrue invents no null fields into user_metadata.
    profile = {name: getattr(row, name) for name in METADATA_COLUMNS}
    metadata = {**(row.extra or {}), **{name: value for name, value in profile.items() if value is not None}}
    created = timestamp(row.joined)
    linked = identities(row, linked)
    providers = list(dict.fromkeys(identity["provider"] for identity in linked))
    confirmed = None if row.unconfirmed or anonymous else timestamp(row.confirmed_at) or created
    # GoTrue gives an anonymous user no provider until one is linked: app_metadata says nothing.
    signs_in_with = {"provider": providers[0], "providers": providers} if providers else {}
    if not anonymous:
        signs_in_with = signs_in_with or {"provider": "email", "providers": ["email"]}
    return {
        "id": row.user_id,
        "aud": "authenticated",
        "role": "authenticated",
        "email": "" if anonymous else row.email,
        "phone": "",
        "email_confirmed_at": confirmed,
        "confirmed_at": confirmed,
        "confirmation_sent_at": timestamp(row.confirmation_sent_at),
        "recovery_sent_at": timestamp(row.recovery_sent_at),
        "new_email": row.new_email,
        "email_change_sent_at": timestamp(row.email_change_sent_at),
        "app_metadata": {**(row.app_metadata or {}), **signs_in_with},
        "user_metadata": metadata,
        "identities": linked,
        "created_at": created,
        "updated_at": timestamp(row.updated_at) or created,
        "last_sign_in_at": timestamp(row.last_sign_in_at),
        "banned_until": timestamp(row.banned_until) if is_banned(row.banned_until) else None,
        "is_anonymous": anonymous,
        **({"invited_at": timestamp(row.invited_at)} if row.invited_at else {}),
        **({"factors": factors} if factors else {}),  # GoTrue leaves it out when there are none
    }


def is_anonymous(email):
    """Whether a users-table email marks an anonymous user (see auth/anonymous.py)."""
    return isinstance(email, str) and email.lower().endswith("@" + ANONYMOUS_DOMAIN)


def identities(row, found=None):
    """GoTrue's `identities` of a user: the e-mail one when they have a password, then the providers'
    (`found`, the user's identity rows, are read here when not given)."""
    if found is None:
        query = select(Identity).where(Identity.user_id == row.user_id).order_by(Identity.created_at)
        found = db.session.execute(query).scalars().all()
    shown = []
    created = timestamp(row.joined)
    if not row.external_only:
        user_id = str(row.user_id)
        shown.append(
            {
                "identity_id": email_identity_id(row.user_id),
                "id": user_id,
                "user_id": user_id,
                "identity_data": {
                    "email": row.email,
                    "email_verified": not row.unconfirmed,
                    "phone_verified": False,
                    "sub": user_id,
                },
                "provider": "email",
                "last_sign_in_at": timestamp(row.last_sign_in_at),
                "created_at": created,
                "updated_at": created,
                "email": row.email,
            }
        )
    for identity in found:
        shown.append(
            {
                "identity_id": identity.id,
                "id": identity.provider_id,
                "user_id": str(identity.user_id),
                "identity_data": identity.identity_data or {},
                "provider": identity.provider,
                "last_sign_in_at": timestamp(identity.last_sign_in_at),
                "created_at": timestamp(identity.created_at),
                "updated_at": timestamp(identity.updated_at),
                "email": identity.email,
            }
        )
    return shown
