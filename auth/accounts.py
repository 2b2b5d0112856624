"""The auth API's work on users: sign-up, sign-in, the current user and updates.
Sessions (start, refresh, sign-out) are sessions.py's."""

import hashlib
import threading
import zlib
from collections import Counter
from datetime import timedelta

from limits import parse as parse_limit
from sqlalchemy import delete, exists, insert, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from auth import audit, hooks, identity, sessions, tokens
from auth.passwords import (
    MIN_LENGTH,
    dummy_hash,
    family,
    hash_cost,
    hash_password,
    needs_rehash,
    verifiable,
    verify_password,
)
from auth.users import is_banned, load_user, user_object
from config import setting
from database import transactions
from database.transactions import CommitAndRaise, error_code, transactional
from errors import (
    APIError,
    Auth,
    invalid_credentials,
    user_banned,
    user_inactive,
    user_not_found,
    validation_failed,
)
from extensions import db, limiter, state
from models import (
    METADATA_COLUMNS,
    PROFILE_FIELDS,
    Challenge,
    Factor,
    FailedSignIn,
    FlowState,
    Identity,
    OneTimeToken,
    Profile,
    Session,
    SignUpLock,
    StorageObject,
    StorageUpload,
    WebAuthnChallenge,
    WebAuthnCredential,
    required_without_default,
    upsert,
    users_table,
)

FAILED_SIGN_INS = parse_limit("10 per 15 minutes")
PASSWORD_CHANGES = parse_limit("30 per 5 minutes")  # each costs a bcrypt hash
MAX_DUMMY_COST = 16  # a stored hash of absurd cost must not make every unknown address that slow


# --- reading users


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


# --- the operations


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


CHECK_VIOLATIONS = (3819, 4025)  # MySQL, MariaDB: a CHECK constraint refused the row


def refuse_a_broken_rule(exc):
    """A 400 when a CHECK of the users table (a rule of the application that owns it) refused the
    values: the client's doing, not a taken address (SQLite's IntegrityError) nor a database that
    is down (MariaDB's 4025 is an OperationalError)."""
    if error_code(exc) in CHECK_VIOLATIONS or "CHECK constraint failed" in str(getattr(exc, "orig", "")):
        raise validation_failed("A value breaks a rule of the users table") from None


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


def set_password_hash(user_id, hashed):
    users = users_table()
    db.session.execute(update(users).where(users.c.user_id == user_id).values(password=hashed))


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


def user_already_exists():
    return APIError(422, Auth.USER_ALREADY_EXISTS, "User already registered")


@transactional
def sign_up(email, password, data):
    if setting("DISABLE_SIGNUP"):
        raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
    user_id = create_user(email, password, data)
    return sessions.start(user_id)


class FailedSignIns:
    """Failed password sign-ins per (client IP, account), counted in the database so that the limit
    holds across processes and instances: past FAILED_SIGN_INS even a right password is refused, or
    the limit would still answer the guess. The account is the user found, so that variants of one
    address share its count; for no user, the address itself.

    The limit holds exactly under a burst: each attempt is counted (reserve) before its password is
    checked, in a transaction of its own, and the right ones are taken back after (release). Were
    the count checked before bcrypt and added to after, fifty attempts at once would all pass the
    check, and 16-17 of 50 were measured to be evaluated."""

    def __init__(self, email, found, ip):
        account = f"user:{found.user_id}" if found is not None else f"email:{email}"
        self.email, self.user_id = email, found.user_id if found is not None else None
        self.key = hashlib.sha256(f"{ip}|{account}".encode()).hexdigest()
        self.enabled = setting("RATE_LIMITS")
        self.window = timedelta(seconds=FAILED_SIGN_INS.get_expiry())

    def reserve(self):
        """Count this attempt, in one statement that adds to the stored count, and refuse it (rolled
        back: a 429) when that passes the limit. Concurrent attempts on any number of instances
        each add one: on one server the row's lock orders them, on a Galera cluster all but one
        of those racing on different nodes are refused at COMMIT and run again; none is let
        through on a count it did not commit. Past the limit an attempt only reads, so that a
        flood of them writes nothing and does not contend for the row."""
        if not self.enabled:
            return
        now = tokens.utcnow()
        start = now - self.window
        counted = select(FailedSignIn.failures, FailedSignIn.window_start).where(FailedSignIn.key == self.key)
        row = db.session.execute(counted).first()
        if row is not None and row.window_start > start:
            self._refuse_past_limit(row, now)
        elif row is not None:  # the window is over: a new one starts
            db.session.execute(
                delete(FailedSignIn).where(FailedSignIn.key == self.key, FailedSignIn.window_start <= start)
            )
        table = FailedSignIn.__table__
        values = {"key": self.key, "window_start": now, "failures": 1}
        upsert(table, values, ["key"], update={"failures": table.c.failures + 1})
        self._refuse_past_limit(db.session.execute(counted.with_for_update()).one(), now, counting=True)

    def _refuse_past_limit(self, row, now, counting=False):
        if row.failures + (0 if counting else 1) > FAILED_SIGN_INS.amount:
            reset = (row.window_start + self.window - now).total_seconds() + tokens.now()
            raise too_many("Too many failed sign-in attempts, try again later", reset)

    def release(self):
        """The reserved attempt had the right password: it is no failure. The rows of windows that
        are over are swept here, off the path a flood of wrong passwords takes."""
        if not self.enabled:
            return
        db.session.execute(
            update(FailedSignIn)
            .where(FailedSignIn.key == self.key, FailedSignIn.failures > 0)
            .values(failures=FailedSignIn.failures - 1)
        )
        db.session.execute(
            delete(FailedSignIn).where(FailedSignIn.window_start <= tokens.utcnow() - self.window)
        )

    def exhausted(self):
        """Whether the failures counted so far use up the allowance: the next attempt is refused (a
        failure that makes it so starts a lockout)."""
        if not self.enabled:
            return False
        counted = select(FailedSignIn.failures).where(FailedSignIn.key == self.key)
        return db.session.execute(counted).scalar() == FAILED_SIGN_INS.amount


def too_many(message, reset):
    retry = max(1, int(reset - tokens.now()))
    return APIError(429, Auth.OVER_REQUEST_RATE_LIMIT, message, headers={"Retry-After": str(retry)})


def unknown_user_hash():
    """The hash a sign-in that names no user is checked against, at the cost most stored hashes have
    (bounded), so that an unknown address takes as long as a wrong password for a known one."""
    cache = state()
    if cache.dummy_cost is None:
        users = users_table()
        recent = select(users.c.password).order_by(users.c.user_id.desc()).limit(100)
        costs = Counter(cost for cost in map(hash_cost, db.session.execute(recent).scalars()) if cost)
        usual = costs.most_common(1)[0][0] if costs else setting("BCRYPT_ROUNDS")
        cache.dummy_cost = min(max(usual, 4), MAX_DUMMY_COST)
        cache.dummy_hash = dummy_hash(cache.dummy_cost)
    return cache.dummy_hash


# A burst of attempts for one (IP, address) takes its turns at the count in this process one at a
# time rather than all at once: the count stays exact without this (the row and the cluster's
# certification keep it), but fifty writers of one row across a Galera cluster's nodes kept
# refusing each other at COMMIT for longer than DB_TIMEOUT. Striped: a lock per address would grow.
RESERVING = [threading.Lock() for _ in range(64)]


def sign_in(email, password, ip):
    """A session for the right password; `ip`, the client's, counts failures per address. Three
    steps: the attempt is counted (and refused past the limit), the password is checked outside
    any transaction (bcrypt holds no lock), then the session starts and the count is taken back."""
    with RESERVING[zlib.crc32(f"{ip}|{email}".encode()) % len(RESERVING)]:
        found, hashed, usable, failures = transactions.write(_reserve_attempt, email, ip)
    right = verify_password(password, hashed) and usable
    if usable and hooks.enabled("password_verification_attempt"):
        ask_password_hook(found.user_id, right, ip)  # outside any transaction, as GoTrue calls it
    return transactions.write(_finish_sign_in, found, failures, right, password)


def _reserve_attempt(email, ip):
    found = find_credentials(email)
    failures = FailedSignIns(email, found, ip)
    failures.reserve()
    # A hash no password matches (a user made by a provider, say) is refused without bcrypt work:
    # such an account, like an unknown address, is checked against the dummy hash instead, so that
    # every refusal costs one bcrypt verify and none tells what kind of account it met.
    usable = found is not None and verifiable(found.password)
    return found, found.password if usable else unknown_user_hash(), usable, failures


def _finish_sign_in(found, failures, right, password):
    if not right:
        # The attempt stays counted; its entries in the audit log are kept, the request refused.
        email, user_id = failures.email, failures.user_id
        audit.record("sign_in_failed", email, actor=email, actor_id=user_id)
        if failures.exhausted():
            details = {"failures": FAILED_SIGN_INS.amount}
            audit.record("lockout", email, details, actor=email, actor_id=user_id)
        raise CommitAndRaise(invalid_credentials())
    failures.release()
    if not found.active:
        raise CommitAndRaise(user_inactive())
    state_of = select(Profile.banned_until, Profile.unconfirmed).where(Profile.user_id == found.user_id)
    profile = db.session.execute(state_of).first()
    if profile is not None and is_banned(profile.banned_until):
        raise CommitAndRaise(user_banned())
    if profile is not None and profile.unconfirmed:
        raise CommitAndRaise(APIError(400, Auth.EMAIL_NOT_CONFIRMED, "Email not confirmed"))
    users = users_table()
    if needs_rehash(found.password, setting("BCRYPT_ROUNDS")):
        rehashed = hash_password(password, setting("BCRYPT_ROUNDS"), prefix=family(found.password))
        db.session.execute(update(users).where(users.c.user_id == found.user_id).values(password=rehashed))
    return sessions.start(found.user_id)


def ask_password_hook(user_id, valid, ip):
    """The password_verification_attempt hook's decision on this attempt: a rejection is GoTrue's
    400 invalid_credentials with the hook's message, and ends the user's sessions if it says so."""
    rejected, message, log_out = hooks.password_verification_attempt(hooks.subject(user_id), valid, ip)
    if not rejected:
        return
    if log_out:
        transactions.write(sessions.end, Session.user_id == user_id)
    raise APIError(400, Auth.INVALID_CREDENTIALS, message)  # the attempt stays counted


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
