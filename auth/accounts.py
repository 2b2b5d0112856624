"""The auth API's work on users: reading them, the checks of their fields, the current user and
updates, and forgetting what the service keeps of one. Making users is signups.py's, password
sign-in signins.py's, sessions (start, refresh, sign-out) sessions.py's."""

from limits import parse as parse_limit
from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from auth import audit, identity, sessions, tokens
from auth.passwords import MIN_LENGTH, family, hash_password
from auth.users import load_user, user_object
from config import setting
from database.failures import error_code
from errors import APIError, Auth, user_not_found, validation_failed
from extensions import db, limiter
from models import METADATA_COLUMNS, PROFILE_FIELDS, required_without_default, upsert, users_table
from models.auth import (
    Challenge,
    Factor,
    FlowState,
    Identity,
    OneTimeToken,
    Profile,
    Session,
    WebAuthnChallenge,
    WebAuthnCredential,
)
from models.storage import StorageObject, StorageUpload

PASSWORD_CHANGES = parse_limit("30 per 5 minutes")  # each costs a bcrypt hash


def _email_matches(column, email):
    # MySQL's usual collations compare case-blind already; SQLite's BINARY does not.
    if db.session.get_bind().dialect.name == "sqlite":
        return column.collate("NOCASE") == email
    return column == email


def find_credentials(email):
    """(user_id, password, active) of the user with `email`, or None. Only sign-in reads the hash.
    The address must match exactly once trimmed and lower-cased: the database's collation finds the
    candidates (and may be blind to accents, é = e), the comparison here decides."""
    users = users_table()
    query = select(users.c.user_id, users.c.password, users.c.active, users.c.email)
    for row in db.session.execute(query.where(_email_matches(users.c.email, email))):
        if (row.email or "").strip().lower() == email:
            return row
    return None


def user_exists(user_id):
    """Whether the users table still has the row `user_id` (another application may delete it)."""
    users = users_table()
    return db.session.execute(select(users.c.user_id).where(users.c.user_id == user_id)).first() is not None


def check_password_strength(password):
    if len(password) < MIN_LENGTH:
        raise APIError(
            422,
            Auth.WEAK_PASSWORD,
            f"Password should be at least {MIN_LENGTH} characters.",
            extra={"weak_password": {"reasons": ["length"]}},  # what the SDKs read the reason from
        )


def split_metadata(data):
    """`data` of a sign-up or update: (users-table columns, about, other metadata keys)."""
    columns, about, extra = {}, None, {}
    for key, value in data.items():
        if key in METADATA_COLUMNS:
            if value is not None and not isinstance(value, str):
                raise validation_failed(f"data.{key}: Not a valid string.")
            if key == "about":
                about = value
            else:
                columns[key] = value
        else:
            extra[key] = value
    return columns, about, extra


def forget(user_id):
    """Delete what the service's own tables keep of user `user_id`: sessions and their refresh
    tokens, factors and their challenges, identities, passkeys, pending codes and flows, the profile; and
    their storage objects and resumable uploads belong to no user any more. Left behind, they would
    be the next user's given the same id (SQLite reuses rowids, an AUTO_INCREMENT can be reset):
    their sessions, their app_metadata and ban, their provider's sign-in, their files."""
    sessions.end(Session.user_id == user_id)
    factors = select(Factor.id).where(Factor.user_id == user_id)
    db.session.execute(delete(Challenge).where(Challenge.factor_id.in_(factors)))
    for model in (Factor, Identity, OneTimeToken, Profile, WebAuthnCredential, WebAuthnChallenge):
        db.session.execute(delete(model).where(model.user_id == user_id))
    flows = or_(FlowState.user_id == user_id, FlowState.link_user_id == user_id)
    db.session.execute(delete(FlowState).where(flows))
    for model in (StorageObject, StorageUpload):  # kept, as the service role's alone
        db.session.execute(update(model).where(model.owner == str(user_id)).values(owner=None))


CHECK_VIOLATIONS = (3819, 4025)  # MySQL, MariaDB: a CHECK constraint refused the row


def refuse_a_broken_rule(exc):
    """A 400 when a CHECK of the users table (a rule of the application that owns it) refused the
    values: the client's doing, not a taken address (SQLite's IntegrityError) nor a database that
    is down (MariaDB's 4025 is an OperationalError)."""
    if error_code(exc) in CHECK_VIOLATIONS or "CHECK constraint failed" in str(getattr(exc, "orig", "")):
        raise validation_failed("A value breaks a rule of the users table") from None


def set_password_hash(user_id, hashed):
    users = users_table()
    db.session.execute(update(users).where(users.c.user_id == user_id).values(password=hashed))


ABOUT_BYTES = 65535  # a TEXT column on MySQL/MariaDB


def check_lengths(columns, about=None):
    """A 400 naming the field when a value is longer than its users-table column holds (the database
    would refuse it, or on a lax server cut it)."""
    users = users_table()
    for name, value in columns.items():
        length = getattr(users.c[name].type, "length", None)
        if isinstance(value, str) and length is not None and len(value) > length:
            raise validation_failed(f"{name}: Longer than maximum length {length}.")
    if about is not None and len(about.encode()) > ABOUT_BYTES:
        raise validation_failed(f"about: Longer than maximum length {ABOUT_BYTES} bytes.")


def too_many(message, reset):
    retry = max(1, int(reset - tokens.now()))
    return APIError(429, Auth.OVER_REQUEST_RATE_LIMIT, message, headers={"Retry-After": str(retry)})


def signed_in_user(who):
    """The caller's user object, from the row the bearer check loaded (auth.identity.Identity.user)."""
    factors, linked = identity.factors_and_identities(who)
    return user_object(who.user, factors, linked)


def current_user(user_id):
    row = load_user(user_id)
    if row is None:
        raise user_not_found(401)
    return user_object(row)


def require_aal2_for_credentials(who, fields):
    """GoTrue's rule: once a user has a verified second factor, a password sign-in or a recovery
    link (aal1) no longer changes the password or the address; that takes the second factor too."""
    new_email = fields.get("email")
    changes_email = new_email is not None and new_email != (who.user.email or "").strip().lower()
    if not (fields.get("password") or changes_email):
        return
    verified = select(Factor.id).where(Factor.user_id == who.user_id, Factor.status == "verified").limit(1)
    if db.session.execute(verified).first() is not None and sessions.level(who.session_id) != sessions.AAL2:
        raise APIError(
            401,
            Auth.INSUFFICIENT_AAL,
            "AAL2 session is required to update email or password when MFA is enabled.",
        )


def change_user(user_id, fields, keep_session=None):
    """Apply an update (without committing): flat fields win over the same keys in `data`; a new
    password ends every session but `keep_session`."""
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
    check_lengths(columns, about if "about" in fields or "about" in data else None)
    if "password" in fields:
        check_password_strength(fields["password"])
        count_password_change(user_id)
        stored = db.session.execute(select(users.c.password).where(users.c.user_id == user_id)).scalar_one()
        columns["password"] = hash_password(
            fields["password"], setting("BCRYPT_ROUNDS"), prefix=family(stored)
        )
    if columns:
        try:
            db.session.execute(update(users).where(users.c.user_id == user_id).values(columns))
        except DBAPIError as exc:
            refuse_a_broken_rule(exc)
            if not isinstance(exc, IntegrityError):
                raise
            raise email_exists() from None
    profile = {"user_id": user_id, "updated_at": tokens.utcnow()}
    if "about" in fields or "about" in data:
        profile["about"] = about
    if extra_changes:
        profile["extra"] = merged(locked_profile_value(user_id, Profile.extra), extra_changes)
    upsert(Profile.__table__, profile, ["user_id"])
    if "password" in fields:
        sessions.end(Session.user_id == user_id, Session.id != keep_session)
        audit.record("password_change", audit.user_target(user_id, columns.get("email")))


def locked_profile_value(user_id, column):
    """`column` of the user's profile, the row (made if missing) locked until the transaction ends,
    so that concurrent merges into it are applied one after the other and none is lost."""
    upsert(Profile.__table__, {"user_id": user_id}, ["user_id"])  # a row to lock; on SQLite, the lock
    found = select(column).where(Profile.user_id == user_id).with_for_update()
    return db.session.execute(found).scalar()


def merged(stored, changes):
    """`changes` merged into the JSON object `stored`; a key set to null is removed."""
    result = {**(stored or {}), **changes}
    return {key: value for key, value in result.items() if value is not None} or None


def count_password_change(user_id):
    """A 429 past PASSWORD_CHANGES for one user: each change costs a bcrypt hash."""
    keys = ("password-change", str(user_id))
    if setting("RATE_LIMITS") and not limiter.limiter.hit(PASSWORD_CHANGES, *keys):
        reset = limiter.limiter.get_window_stats(PASSWORD_CHANGES, *keys).reset_time
        raise too_many("Too many password changes, try again later", reset)


def email_exists():
    return APIError(422, Auth.EMAIL_EXISTS, "A user with this email address has already been registered")


def set_active(user_id, active):
    """Activate or deactivate a user (without committing); deactivating ends their sessions."""
    users = users_table()
    db.session.execute(update(users).where(users.c.user_id == user_id).values(active=1 if active else 0))
    if not active:
        sessions.end(Session.user_id == user_id)
    audit.record("user_activated" if active else "user_deactivated", audit.user_target(user_id))
