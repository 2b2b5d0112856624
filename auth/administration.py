"""The administrator's work on users (the service_role key): GoTrue's /admin/users. Each write is one
transaction."""

from sqlalchemy import delete, func, select, true
from sqlalchemy.exc import IntegrityError

from auth import audit, sessions, tokens
from auth.accounts import change_user, forget, locked_profile_value, merged, set_active
from auth.signups import create_user
from auth.users import factors_of, identities_of, load_user, timestamp, user_object, user_query
from database.transactions import transactional
from errors import APIError, Auth, user_not_found
from extensions import db
from models import METADATA_COLUMNS, upsert, users_table
from models.auth import Profile, Session


def admin_get_user(user_id):
    row = load_user(user_id)
    if row is None:
        raise user_not_found()
    return user_object(row)


USER_ORDERS = ("newest", "oldest", "email", "last_sign_in")


def admin_list_users(page, per_page, email="", order="newest"):
    """One page of users, newest first as GoTrue lists them (or in another of USER_ORDERS), whose
    address contains `email` (any case), and how many match in all."""
    users = users_table()
    condition = true()
    if email:
        escaped = email.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        condition = func.lower(users.c.email).like(f"%{escaped}%", escape="\\")
    by = {
        "newest": [users.c.user_id.desc()],
        "oldest": [users.c.user_id.asc()],
        "email": [users.c.email.asc(), users.c.user_id.asc()],
        "last_sign_in": [
            Profile.last_sign_in_at.is_(None),
            Profile.last_sign_in_at.desc(),
            users.c.user_id.desc(),
        ],
    }[order]
    total = db.session.execute(select(func.count()).select_from(users).where(condition)).scalar()
    rows = db.session.execute(
        user_query().where(condition).order_by(*by).limit(per_page).offset((page - 1) * per_page)
    ).all()
    ids = [row.user_id for row in rows]
    factors, linked = factors_of(ids), identities_of(ids)  # one query each for the page, not per user
    return [
        user_object(row, factors.get(row.user_id, []), linked.get(row.user_id, [])) for row in rows
    ], total


def admin_list_sessions(user_id):
    """The user's sessions, newest first: id, when started and last refreshed, and their level."""
    query = select(Session).where(Session.user_id == user_id).order_by(Session.created_at.desc())
    return [
        {
            "id": row.id,
            "created_at": timestamp(row.created_at),
            "refreshed_at": timestamp(row.refreshed_at),
            "aal": row.aal or "aal1",
        }
        for row in db.session.execute(query).scalars()
    ]


@transactional
def admin_create_user(fields):
    active = fields.pop("active", True)
    confirmed = fields.pop("email_confirm", True)  # GoTrue's false: the address is not yet confirmed
    data = {**(fields.pop("user_metadata", None) or {}), **(fields.pop("data", None) or {})}
    data.update({name: fields[name] for name in METADATA_COLUMNS if name in fields})
    administrative = {name: fields.pop(name) for name in ("ban_duration", "app_metadata") if name in fields}
    user_id = create_user(fields["email"], fields["password"], data)
    if not confirmed:
        upsert(Profile.__table__, {"user_id": user_id, "unconfirmed": True}, ["user_id"])
    if not active:
        set_active(user_id, False)
    _administer(user_id, administrative)
    return admin_get_user(user_id)


@transactional
def admin_update_user(user_id, fields):
    """PUT /admin/users/{id}: profile fields, password (ending every session), `active`,
    `ban_duration`, `app_metadata`, and `email_confirm: true` (false changes nothing, as GoTrue)."""
    admin_get_user(user_id)
    active = fields.pop("active", None)
    if fields.pop("email_confirm", False):
        upsert(
            Profile.__table__,
            {"user_id": user_id, "unconfirmed": None, "confirmed_at": tokens.utcnow()},
            ["user_id"],
        )
    metadata = fields.pop("user_metadata", None)
    administrative = {name: fields.pop(name) for name in ("ban_duration", "app_metadata") if name in fields}
    if metadata:
        fields["data"] = {**metadata, **(fields.get("data") or {})}
    change_user(user_id, fields)
    if active is not None:
        set_active(user_id, active)
    _administer(user_id, administrative)
    return admin_get_user(user_id)


def _administer(user_id, fields):
    """What only an administrator sets: a ban (`ban_duration`: a timedelta, or None to lift it),
    which ends the user's sessions, and `app_metadata`, merged into what is stored (a key set to
    null is removed)."""
    if not fields:
        return
    profile = {"user_id": user_id, "updated_at": tokens.utcnow()}
    if "ban_duration" in fields:
        duration = fields["ban_duration"]
        profile["banned_until"] = None if duration is None else tokens.utcnow() + duration
        if duration is not None:
            sessions.end(Session.user_id == user_id)
            until = profile["banned_until"].strftime("%Y-%m-%dT%H:%M:%SZ")
            audit.record("ban", audit.user_target(user_id), {"until": until})
        else:
            audit.record("unban", audit.user_target(user_id))
    if fields.get("app_metadata"):
        stored = locked_profile_value(user_id, Profile.app_metadata)
        profile["app_metadata"] = merged(stored, fields["app_metadata"])
        audit.record("app_metadata_change", audit.user_target(user_id), {"set": fields["app_metadata"]})
    upsert(Profile.__table__, profile, ["user_id"])


@transactional
def admin_delete_user(user_id):
    """Delete the user's row, profile and sessions, and what else is theirs: factors, identities,
    pending codes and flows; their storage objects are kept, owned by no user (accounts.forget).
    Left behind, an identity would keep signing in to a user that is gone (and, were the id ever
    used again, to a stranger)."""
    email = admin_get_user(user_id)["email"]
    users = users_table()
    forget(user_id)
    audit.record("user_deleted", audit.user_target(user_id, email))
    try:
        db.session.execute(delete(users).where(users.c.user_id == user_id))
    except IntegrityError:
        raise APIError(
            409, Auth.USER_REFERENCED, "Other rows still refer to this user: deactivate it instead"
        ) from None
