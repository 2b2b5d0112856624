"""The auth API's work (SPEC §3): sign-up, sign-in, refresh, the current user, updates, sign-out."""

import secrets
import uuid

from flask import current_app
from limits import parse as parse_limit
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

import tokens
from errors import APIError
from extensions import client_ip, db, limiter, state
from models import (
    PROFILE_FIELDS,
    Profile,
    RefreshToken,
    Session,
    required_without_default,
    upsert,
    users_table,
)
from passwords import MIN_LENGTH, family, hash_password, needs_rehash, verify_password

FAILED_SIGN_INS = parse_limit("10 per 15 minutes")
METADATA_COLUMNS = (*PROFILE_FIELDS, "about")


def config(name):
    return current_app.config[name]


def invalid_credentials():
    return APIError(400, "invalid_credentials", "Invalid login credentials")


def refresh_token_not_found():
    return APIError(400, "refresh_token_not_found", "Invalid Refresh Token: Refresh Token Not Found")


# --- reading users


def _email_matches(column, email):
    # MySQL's usual collations compare case-blind already; SQLite's BINARY does not.
    if db.session.get_bind().dialect.name == "sqlite":
        return column.collate("NOCASE") == email
    return column == email


def find_credentials(email):
    """(user_id, password, active) of the user with `email`, or None. Only sign-in reads the hash."""
    users = users_table()
    query = select(users.c.user_id, users.c.password, users.c.active)
    return db.session.execute(query.where(_email_matches(users.c.email, email))).first()


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
        Profile.about,
        Profile.extra,
        Profile.updated_at,
        Profile.last_sign_in_at,
    ]


def user_query():
    """Users with their profiles."""
    users = users_table()
    return select(*user_columns()).outerjoin(Profile, Profile.user_id == users.c.user_id)


def load_user(user_id):
    """The user and their profile as one row, or None."""
    users = users_table()
    return db.session.execute(user_query().where(users.c.user_id == user_id)).first()


def timestamp(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def user_object(row):
    """SPEC §3.1's user object; `id` is the integer user_id."""
    metadata = {**(row.extra or {}), **{name: getattr(row, name) for name in METADATA_COLUMNS}}
    created = timestamp(row.joined)
    return {
        "id": row.user_id,
        "aud": "authenticated",
        "role": "authenticated",
        "email": row.email,
        "phone": "",
        "email_confirmed_at": created,
        "confirmed_at": created,
        "app_metadata": {"provider": "email", "providers": ["email"]},
        "user_metadata": metadata,
        "identities": [],
        "created_at": created,
        "updated_at": timestamp(row.updated_at) or created,
        "last_sign_in_at": timestamp(row.last_sign_in_at),
        "is_anonymous": False,
    }


# --- sessions


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


def start_session(user_id):
    now = tokens.utcnow()
    session = Session(id=str(uuid.uuid4()), user_id=user_id, created_at=now, refreshed_at=now)
    db.session.add(session)
    db.session.flush()
    return session, _new_refresh_token(session.id)


def session_object(row, session, refresh):
    """SPEC §3.1's session object: a fresh access token, the session's refresh token and the user
    (`row`, from load_user)."""
    user = user_object(row)
    user_id = row.user_id
    secret = config("JWT_SECRET")
    claims = {
        "sub": str(user_id),
        "email": user["email"],
        "phone": "",
        "session_id": session.id,
        "is_anonymous": False,
        "aal": "aal1",
        "amr": [{"method": "password", "timestamp": int(session.created_at.timestamp())}],
        "user_metadata": user["user_metadata"],
        "app_metadata": user["app_metadata"],
    }
    access, expires_at = tokens.access_token(claims, secret, config("JWT_EXPIRY"))
    refresh_token = tokens.refresh_token(
        session.id,
        user_id,
        refresh.token,
        refresh.issued_at,
        secret,
        config("REFRESH_TOKEN_EXPIRY"),
    )
    return {
        "access_token": access,
        "token_type": "bearer",
        "expires_in": config("JWT_EXPIRY"),
        "expires_at": expires_at,
        "refresh_token": refresh_token,
        "user": user,
    }


def end_sessions(*conditions):
    """Delete the sessions matching `conditions` and their refresh tokens: their tokens die at once."""
    doomed = select(Session.id).where(*conditions)
    db.session.execute(delete(RefreshToken).where(RefreshToken.session_id.in_(doomed)))
    db.session.execute(delete(Session).where(*conditions))


# --- the operations


def check_password_strength(password):
    if len(password) < MIN_LENGTH:
        raise APIError(422, "weak_password", f"Password should be at least {MIN_LENGTH} characters.")


def split_metadata(data):
    """`data` of a sign-up or update: (users-table columns, about, other metadata keys)."""
    columns, about, extra = {}, None, {}
    for key, value in data.items():
        if key in METADATA_COLUMNS:
            if value is not None and not isinstance(value, str):
                raise APIError(400, "validation_failed", f"data.{key}: Not a valid string.")
            if key == "about":
                about = value
            else:
                columns[key] = value
        else:
            extra[key] = value
    return columns, about, extra


def create_user(email, password, data):
    """Insert a user (bcrypt hash, active=1, joined=now) and their profile; the new user_id."""
    check_password_strength(password)
    columns, about, extra = split_metadata(data)
    if find_credentials(email) is not None:
        raise user_already_exists()
    users = users_table()
    for name in required_without_default(users):
        if columns.get(name) is None:
            columns[name] = ""
    now = tokens.utcnow()
    values = {
        **columns,
        "email": email,
        "password": hash_password(password, config("BCRYPT_ROUNDS")),
        "active": 1,
        "joined": now,
    }
    try:
        user_id = db.session.execute(insert(users).values(values)).inserted_primary_key[0]
    except IntegrityError:
        db.session.rollback()
        raise user_already_exists() from None
    profile = {"user_id": user_id, "about": about, "extra": extra or None, "updated_at": now}
    upsert(Profile.__table__, profile, ["user_id"])
    return user_id


def user_already_exists():
    return APIError(422, "user_already_exists", "User already registered")


def sign_up(email, password, data):
    if config("DISABLE_SIGNUP"):
        raise APIError(422, "signup_disabled", "Signups not allowed for this instance")
    user_id = create_user(email, password, data)
    return _signed_in(user_id)


def _signed_in(user_id):
    """Record the sign-in, open a session and commit: the session object to answer with."""
    upsert(
        Profile.__table__,
        {"user_id": user_id, "last_sign_in_at": tokens.utcnow()},
        ["user_id"],
    )
    session, refresh = start_session(user_id)
    body = session_object(load_user(user_id), session, refresh)
    db.session.commit()
    return body


class FailedSignIns:
    """Failed password sign-ins per (IP, email), in the rate-limit store: past the limit, even a right
    password is refused, or the limit would still answer the guess."""

    def __init__(self, email):
        self.keys = ("failed-sign-in", client_ip(), email)
        self.enabled = config("RATE_LIMITS")

    def check(self):
        if self.enabled and not limiter.limiter.test(FAILED_SIGN_INS, *self.keys):
            reset = limiter.limiter.get_window_stats(FAILED_SIGN_INS, *self.keys).reset_time
            retry = max(1, int(reset - tokens.now()))
            raise APIError(
                429,
                "over_request_rate_limit",
                "Too many failed sign-in attempts, try again later",
                headers={"Retry-After": str(retry)},
            )

    def record(self):
        if self.enabled:
            limiter.limiter.hit(FAILED_SIGN_INS, *self.keys)


def sign_in(email, password):
    failures = FailedSignIns(email)
    failures.check()
    found = find_credentials(email)
    # An unknown email costs the same bcrypt check as a wrong password: timing tells nothing.
    hashed = found.password if found is not None else state().dummy_hash
    if not verify_password(password, hashed) or found is None:
        failures.record()
        raise invalid_credentials()
    if not found.active:
        raise APIError(400, "user_inactive", "User account is inactive")
    users = users_table()
    if needs_rehash(found.password, config("BCRYPT_ROUNDS")):
        rehashed = hash_password(password, config("BCRYPT_ROUNDS"), prefix=family(found.password))
        db.session.execute(update(users).where(users.c.user_id == found.user_id).values(password=rehashed))
    return _signed_in(found.user_id)


def refresh(token):
    """Rotate a refresh token (SPEC §3.2): single use, a grace interval for racing retries, and a
    reuse after it revokes the whole session as theft."""
    try:
        claims = tokens.decode_refresh_token(token, config("JWT_SECRET"))
    except tokens.TokenError as exc:
        if exc.expired:
            raise APIError(400, "session_expired", "Invalid Refresh Token: Session Expired") from None
        raise refresh_token_not_found() from None
    now = tokens.utcnow()
    # The conditional UPDATE is the lock: of two racing requests exactly one rotates the token.
    rotated = db.session.execute(
        update(RefreshToken)
        .where(RefreshToken.token == claims["jti"], RefreshToken.revoked.is_(False))
        .values(revoked=True, updated_at=now)
    ).rowcount
    row = db.session.execute(
        select(RefreshToken).where(RefreshToken.token == claims["jti"])
    ).scalar_one_or_none()
    if row is None or row.session_id != claims["sid"]:
        raise refresh_token_not_found()
    session = db.session.get(Session, row.session_id)
    if session is None:
        raise refresh_token_not_found()
    if rotated:
        current = _new_refresh_token(session.id, parent=row.token)
        session.refreshed_at = now
    else:
        current = _reuse(row, session, now)
    user = load_user(session.user_id)
    if user is None:
        raise refresh_token_not_found()
    if not user.active:
        raise APIError(400, "user_inactive", "User account is inactive")
    body = session_object(user, session, current)
    db.session.commit()
    return body


def _reuse(row, session, now):
    """A revoked token presented again: the current token inside the grace interval, theft after."""
    grace = config("REFRESH_TOKEN_REUSE_INTERVAL")
    if (now - row.updated_at).total_seconds() <= grace:
        current = db.session.execute(
            select(RefreshToken)
            .where(RefreshToken.session_id == session.id, RefreshToken.revoked.is_(False))
            .order_by(RefreshToken.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        if current is not None:
            return current
    end_sessions(Session.id == session.id)
    db.session.commit()
    raise APIError(400, "refresh_token_already_used", "Invalid Refresh Token: Already Used")


def current_user(user_id):
    row = load_user(user_id)
    if row is None:
        raise APIError(401, "user_not_found", "User from sub claim in JWT does not exist")
    return user_object(row)


def update_user(who, fields):
    """PATCH/PUT /user: flat fields win over the same keys in `data`; a new password ends the
    user's other sessions."""
    change_user(who.user_id, fields, keep_session=who.session_id)
    db.session.commit()
    return current_user(who.user_id)


def change_user(user_id, fields, keep_session=None):
    """Apply an update (without committing); a new password ends every session but `keep_session`."""
    users = users_table()
    data = fields.get("data") or {}
    columns, about, extra_changes = split_metadata(data)
    columns.update({name: fields[name] for name in PROFILE_FIELDS if name in fields})
    about = fields.get("about", about)
    for name in required_without_default(users):
        if name in columns and columns[name] is None:
            columns[name] = ""
    if "email" in fields:
        found = find_credentials(fields["email"])
        if found is not None and found.user_id != user_id:
            raise email_exists()
        columns["email"] = fields["email"]
    if "password" in fields:
        check_password_strength(fields["password"])
        stored = db.session.execute(select(users.c.password).where(users.c.user_id == user_id)).scalar_one()
        columns["password"] = hash_password(
            fields["password"], config("BCRYPT_ROUNDS"), prefix=family(stored)
        )
    if columns:
        try:
            db.session.execute(update(users).where(users.c.user_id == user_id).values(columns))
        except IntegrityError:
            db.session.rollback()
            raise email_exists() from None
    profile = {"user_id": user_id, "updated_at": tokens.utcnow()}
    if "about" in fields or "about" in data:
        profile["about"] = about
    if extra_changes:
        stored = db.session.get(Profile, user_id)
        extra = dict((stored.extra if stored is not None else None) or {})
        extra.update(extra_changes)
        profile["extra"] = {k: v for k, v in extra.items() if v is not None} or None
    upsert(Profile.__table__, profile, ["user_id"])
    if "password" in fields:
        end_sessions(Session.user_id == user_id, Session.id != keep_session)


def email_exists():
    return APIError(422, "email_exists", "A user with this email address has already been registered")


LOGOUT_SCOPES = ("global", "local", "others")


def sign_out(who, scope):
    if scope not in LOGOUT_SCOPES:
        raise APIError(400, "validation_failed", f"scope: must be one of {', '.join(LOGOUT_SCOPES)}")
    if scope == "local":
        end_sessions(Session.id == who.session_id)
    elif scope == "others":
        end_sessions(Session.user_id == who.user_id, Session.id != who.session_id)
    else:
        end_sessions(Session.user_id == who.user_id)
    db.session.commit()


def set_active(user_id, active):
    """Activate or deactivate a user (without committing); deactivating ends their sessions."""
    users = users_table()
    db.session.execute(update(users).where(users.c.user_id == user_id).values(active=1 if active else 0))
    if not active:
        end_sessions(Session.user_id == user_id)


# --- administration (service_role)


def user_not_found():
    return APIError(404, "user_not_found", "User not found")


def admin_get_user(user_id):
    row = load_user(user_id)
    if row is None:
        raise user_not_found()
    return user_object(row)


def admin_list_users(page, per_page):
    """One page of users in user_id order, and how many there are in all."""
    users = users_table()
    total = db.session.execute(select(func.count()).select_from(users)).scalar()
    rows = db.session.execute(
        user_query().order_by(users.c.user_id).limit(per_page).offset((page - 1) * per_page)
    ).all()
    return [user_object(row) for row in rows], total


def admin_create_user(fields):
    active = fields.pop("active", True)
    data = {**(fields.pop("user_metadata", None) or {}), **(fields.pop("data", None) or {})}
    data.update({name: fields[name] for name in METADATA_COLUMNS if name in fields})
    user_id = create_user(fields["email"], fields["password"], data)
    if not active:
        set_active(user_id, False)
    db.session.commit()
    return admin_get_user(user_id)


def admin_update_user(user_id, fields):
    """PUT /admin/users/{id}: profile fields, password (ending every session), `active`."""
    admin_get_user(user_id)
    active = fields.pop("active", None)
    metadata = fields.pop("user_metadata", None)
    if metadata:
        fields["data"] = {**metadata, **(fields.get("data") or {})}
    change_user(user_id, fields)
    if active is not None:
        set_active(user_id, active)
    db.session.commit()
    return admin_get_user(user_id)


def admin_delete_user(user_id):
    """Delete the user's row, profile and sessions."""
    admin_get_user(user_id)
    users = users_table()
    end_sessions(Session.user_id == user_id)
    db.session.execute(delete(Profile).where(Profile.user_id == user_id))
    try:
        db.session.execute(delete(users).where(users.c.user_id == user_id))
    except IntegrityError:
        db.session.rollback()
        raise APIError(
            409, "user_referenced", "Other rows still refer to this user: deactivate it instead"
        ) from None
    db.session.commit()
