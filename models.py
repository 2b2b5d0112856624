"""The service's own tables, the users table as another application may have made it, and a user as
the auth API shows them."""

import logging

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.orm import Mapped, mapped_column

from config import setting
from extensions import db, state

log = logging.getLogger("minibase")

# Prefixed so they cannot collide with the tables of the application that shares the database.
SERVICE_TABLES = (
    "minibase_sessions",
    "minibase_refresh_tokens",
    "minibase_profiles",
    "minibase_signup_locks",
    "minibase_failed_sign_ins",
    "minibase_one_time_tokens",
    "minibase_email_sends",
    "minibase_mfa_factors",
    "minibase_mfa_challenges",
    "minibase_flow_states",
    "minibase_identities",
    "minibase_webauthn_credentials",
    "minibase_webauthn_challenges",
    "minibase_storage_buckets",
    "minibase_storage_objects",
    "minibase_realtime_changes",
    "minibase_webhook_events",
    "minibase_webhook_deliveries",
    "minibase_webhook_attempts",
    "minibase_schedule_runs",
    "minibase_callouts",
    "minibase_audit_log",
    "minibase_dashboard_sessions",
    "minibase_alembic_version",
)
USER_COLUMNS = (
    "user_id",
    "email",
    "password",
    "username",
    "first_name",
    "last_name",
    "active",
    "joined",
)
PROFILE_FIELDS = ("username", "first_name", "last_name")
METADATA_COLUMNS = (*PROFILE_FIELDS, "about")  # shown in user_metadata, beside the profile's `extra`


class Session(db.Model):
    __tablename__ = "minibase_sessions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, index=True)
    created_at = mapped_column(DateTime, nullable=False)
    refreshed_at = mapped_column(DateTime, nullable=False)
    # The assurance level and how the user proved who they are (GoTrue's amr entries), kept with the
    # session so that a refresh keeps them. NULL: aal1 by a password at created_at.
    aal: Mapped[str | None] = mapped_column(String(8))
    amr: Mapped[list | None] = mapped_column(JSON)
    factor_id: Mapped[str | None] = mapped_column(String(36))  # the factor that raised it to aal2
    # How the session was signed in, GoTrue's `amr` method ("oauth", …); None is a password.
    method: Mapped[str | None] = mapped_column(String(32))


class RefreshToken(db.Model):
    __tablename__ = "minibase_refresh_tokens"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    token: Mapped[str] = mapped_column(String(64), unique=True)
    session_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("minibase_sessions.id", ondelete="CASCADE"), index=True
    )
    parent: Mapped[str | None] = mapped_column(String(64))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    issued_at: Mapped[int] = mapped_column(BigInteger, nullable=False)  # the token's iat
    updated_at = mapped_column(DateTime, nullable=False)


class Profile(db.Model):
    """What the users table has no column for: `about`, other metadata, and timestamps."""

    __tablename__ = "minibase_profiles"

    user_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    about: Mapped[str | None] = mapped_column(Text)
    extra: Mapped[dict | None] = mapped_column(JSON)
    updated_at = mapped_column(DateTime)
    last_sign_in_at = mapped_column(DateTime)
    banned_until = mapped_column(DateTime)  # set by an administrator's ban_duration
    app_metadata: Mapped[dict | None] = mapped_column(JSON)  # set by an administrator only
    unconfirmed: Mapped[bool | None] = mapped_column(Boolean)  # a sign-up awaiting its confirmation
    confirmation_sent_at = mapped_column(DateTime)
    confirmed_at = mapped_column(DateTime)
    recovery_sent_at = mapped_column(DateTime)
    new_email: Mapped[str | None] = mapped_column(String(255))  # awaiting the new address's confirmation
    email_change_sent_at = mapped_column(DateTime)
    invited_at = mapped_column(DateTime)  # when an invitation was mailed or generated


class OneTimeToken(db.Model):
    """A link token and a 6-digit code for one user and purpose, as keyed hashes only; a new one for
    the same user and purpose replaces the old."""

    __tablename__ = "minibase_one_time_tokens"

    user_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    purpose: Mapped[str] = mapped_column(String(20), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    code_hash: Mapped[str] = mapped_column(String(64))
    email: Mapped[str] = mapped_column(String(255))
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False)
    wrong_guesses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Factor(db.Model):
    """A second factor (TOTP) of a user. `secret` is sealed (auth/encryption.py), never plain."""

    __tablename__ = "minibase_mfa_factors"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, index=True)
    friendly_name: Mapped[str] = mapped_column(String(255), default="")
    factor_type: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))  # unverified | verified
    secret: Mapped[str] = mapped_column(String(255))
    last_step: Mapped[int | None] = mapped_column(BigInteger)  # the last accepted code's time step
    created_at = mapped_column(DateTime, nullable=False)
    updated_at = mapped_column(DateTime, nullable=False)
    last_challenged_at = mapped_column(DateTime)


class Challenge(db.Model):
    """A challenge of a factor: verified once, within its expiry, by at most MAX_ATTEMPTS codes."""

    __tablename__ = "minibase_mfa_challenges"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    factor_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("minibase_mfa_factors.id", ondelete="CASCADE"), index=True
    )
    ip_address: Mapped[str] = mapped_column(String(64))
    created_at = mapped_column(DateTime, nullable=False)
    verified_at = mapped_column(DateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class EmailSend(db.Model):
    """When an e-mail last went to an address (a keyed hash of it), for EMAIL_RATE_LIMIT."""

    __tablename__ = "minibase_email_sends"

    address_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    sent_at = mapped_column(DateTime, nullable=False, index=True)


class OutgoingMail(db.Model):
    """An e-mail (or a send_email hook call) waiting to leave, written with its token: its content
    sealed (auth.encryption, bound to the token's hash), and who may send it until when (auth.outbox)."""

    __tablename__ = "minibase_mail_outbox"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    content: Mapped[str] = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"), nullable=False)
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False)  # the token's: past it the link is dead
    claimed_by: Mapped[str] = mapped_column(String(32), nullable=False)
    lease_until = mapped_column(DateTime, nullable=False, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class FlowState(db.Model):
    """A sign-in under way: a third-party sign-in between /authorize and /callback (`state_key`),
    and a PKCE flow's challenge and, once its redirect is made, its auth code (a keyed hash)."""

    __tablename__ = "minibase_flow_states"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[int | None] = mapped_column(Integer, index=True)
    method: Mapped[str] = mapped_column(String(32))  # GoTrue's authentication method: oauth, recovery…
    provider: Mapped[str] = mapped_column(String(32))
    code_challenge: Mapped[str | None] = mapped_column(String(128))
    code_challenge_method: Mapped[str | None] = mapped_column(String(8))
    auth_code_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    redirect_to: Mapped[str | None] = mapped_column(Text)
    link_user_id: Mapped[int | None] = mapped_column(Integer)  # /user/identities/authorize's caller
    nonce: Mapped[str | None] = mapped_column(String(64))
    created_at = mapped_column(DateTime, nullable=False, index=True)
    auth_code_issued_at = mapped_column(DateTime)


class Identity(db.Model):
    """A third-party account (`provider`, its user id) linked to a user, with its profile."""

    __tablename__ = "minibase_identities"
    __table_args__ = (UniqueConstraint("provider", "provider_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    provider_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(Integer, index=True)
    email: Mapped[str | None] = mapped_column(String(255))
    identity_data: Mapped[dict | None] = mapped_column(JSON)
    created_at = mapped_column(DateTime, nullable=False)
    updated_at = mapped_column(DateTime, nullable=False)
    last_sign_in_at = mapped_column(DateTime)


class WebAuthnCredential(db.Model):
    """A passkey (or a WebAuthn second factor, with `factor_id`): the public key (COSE, base64url)
    and the sign counter an authenticator's assertions must raise."""

    __tablename__ = "minibase_webauthn_credentials"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, index=True)
    credential_key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the credential id
    credential_id: Mapped[str] = mapped_column(Text)  # base64url
    public_key: Mapped[str] = mapped_column(Text)  # base64url of the COSE key
    sign_count: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    aaguid: Mapped[str | None] = mapped_column(String(36))
    transports: Mapped[list | None] = mapped_column(JSON)
    friendly_name: Mapped[str] = mapped_column(String(120), default="", server_default="")
    factor_id: Mapped[str | None] = mapped_column(String(36), index=True)
    created_at = mapped_column(DateTime, nullable=False)
    updated_at = mapped_column(DateTime, nullable=False)
    last_used_at = mapped_column(DateTime)


class WebAuthnChallenge(db.Model):
    """A ceremony under way: the challenge sent (base64url), for whom (none: a passkey sign-in), used
    up by the verify that names it, whatever it concludes."""

    __tablename__ = "minibase_webauthn_challenges"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # registration | authentication | mfa_create | mfa_request
    user_id: Mapped[int | None] = mapped_column(Integer, index=True)
    factor_id: Mapped[str | None] = mapped_column(String(36))
    challenge: Mapped[str] = mapped_column(String(128))
    ip_address: Mapped[str | None] = mapped_column(String(64))
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False, index=True)


class SignUpLock(db.Model):
    """A row per address signed up where no unique index on the users table's email column keeps
    two racing sign-ups from both inserting it: a sign-up holds its row's lock until it commits."""

    __tablename__ = "minibase_signup_locks"

    email_key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the address


class FailedSignIn(db.Model):
    """Failed password sign-ins of one (client IP, account) in the window that started at
    `window_start`."""

    __tablename__ = "minibase_failed_sign_ins"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    window_start = mapped_column(DateTime, nullable=False, index=True)
    failures: Mapped[int] = mapped_column(Integer, nullable=False)


class AuditEntry(db.Model):
    """One auth event or dashboard action: who (`actor`, and their user id when they are a user), what
    (`action` on `target`), from where (`ip`), through which door (`via`: auth, admin, dashboard, cli)."""

    __tablename__ = "minibase_audit_log"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    created_at = mapped_column(DateTime, nullable=False, index=True)
    actor: Mapped[str] = mapped_column(String(255), nullable=False)
    actor_id: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str | None] = mapped_column(String(512))
    ip: Mapped[str] = mapped_column(String(64), nullable=False)
    via: Mapped[str] = mapped_column(String(16), nullable=False)
    details: Mapped[dict | None] = mapped_column(JSON)


class DashboardSession(db.Model):
    """A dashboard sign-in: the cookie's token (as a hash), the auth session it rides on (ended with
    it), its CSRF token, and whether the second factor, when the admin has one, was given."""

    __tablename__ = "minibase_dashboard_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    user_id: Mapped[int] = mapped_column(Integer, nullable=False)
    csrf: Mapped[str] = mapped_column(String(64), nullable=False)
    verified: Mapped[bool] = mapped_column(Boolean, nullable=False)
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False)


# Storage's times to the millisecond, as Supabase Storage gives them (and sorts and pages by them):
# SQLite keeps what it is given; MySQL's DATETIME keeps whole seconds unless told otherwise.
STORAGE_TIME = DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


class StorageBucket(db.Model):
    """A storage bucket: from tables.toml's [buckets.NAME] (`declared`, made or updated at start) or
    made through the bucket API. Who may do what in it is tables.toml's, not a column's."""

    __tablename__ = "minibase_storage_buckets"

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    public: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    file_size_limit: Mapped[int | None] = mapped_column(BigInteger)  # bytes; None: STORAGE_FILE_SIZE_LIMIT
    allowed_mime_types: Mapped[list | None] = mapped_column(JSON)  # None: any
    declared: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at = mapped_column(STORAGE_TIME, nullable=False)
    updated_at = mapped_column(STORAGE_TIME, nullable=False)


class StorageObject(db.Model):
    """An object's metadata. Its bytes live under `storage_key`, a name minibase made, never the
    client's `name`: a new upload of a name gets a new key, so the old bytes stay whole until the
    row that names the new ones has committed."""

    __tablename__ = "minibase_storage_objects"
    __table_args__ = (UniqueConstraint("bucket_id", "name", name="uq_minibase_storage_objects_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    bucket_id: Mapped[str] = mapped_column(
        String(63), ForeignKey("minibase_storage_buckets.id"), nullable=False
    )
    name: Mapped[str] = mapped_column(String(512), nullable=False)
    # the uploader's user id; None for a key's upload, or once that user is gone
    owner: Mapped[str | None] = mapped_column(String(64), index=True)
    storage_key: Mapped[str] = mapped_column(String(64), nullable=False)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    mimetype: Mapped[str] = mapped_column(String(255), nullable=False)
    cache_control: Mapped[str] = mapped_column(String(255), nullable=False)
    etag: Mapped[str] = mapped_column(String(64), nullable=False)  # md5 of the bytes, hex
    user_metadata: Mapped[dict | None] = mapped_column(JSON)
    created_at = mapped_column(STORAGE_TIME, nullable=False)
    updated_at = mapped_column(STORAGE_TIME, nullable=False)


class StorageUpload(db.Model):
    """A resumable upload in progress: who began it (`role` and `owner`, as an object's owner), the
    object it will make, its declared `length`, the bytes `received` so far in `parts` (keys in the
    backend's uploads/ area, in order). Gone when the object is made, the upload is terminated, or
    it has expired."""

    __tablename__ = "minibase_storage_uploads"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    bucket_id: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(512), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)
    upsert: Mapped[bool] = mapped_column(Boolean, nullable=False)
    length: Mapped[int] = mapped_column(BigInteger, nullable=False)
    received: Mapped[int] = mapped_column(BigInteger, nullable=False)
    parts: Mapped[list] = mapped_column(JSON, nullable=False)
    mimetype: Mapped[str] = mapped_column(String(255), nullable=False)
    cache_control: Mapped[str] = mapped_column(String(255), nullable=False)
    user_metadata: Mapped[dict | None] = mapped_column(JSON)
    upload_metadata: Mapped[str | None] = mapped_column(Text)  # the Upload-Metadata header, as sent
    created_at = mapped_column(DateTime, nullable=False)
    expires_at = mapped_column(DateTime, nullable=False, index=True)


def users_table():
    """The users table as it is in the database, reflected once per app."""
    cache = state()
    if cache.users is None:
        name = setting("USERS_TABLE")
        table = Table(name, MetaData(), autoload_with=db.engine)
        missing = [c for c in USER_COLUMNS if c not in table.c]
        if missing:
            raise RuntimeError(f"users table {name!r} lacks the columns {', '.join(missing)}")
        cache.email_is_unique = email_is_unique(table)
        if not cache.email_is_unique:
            log.warning(
                "users table %r has no unique index on email: sign-ups of one address are "
                "serialized through minibase_signup_locks instead",
                name,
            )
        cache.users = table
    return cache.users


def email_is_unique(table):
    """Whether a unique index or constraint on the email column alone guards the users table."""
    for index in table.indexes:
        if index.unique and [column.name for column in index.columns] == ["email"]:
            return True
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint | PrimaryKeyConstraint):
            if [column.name for column in constraint.columns] == ["email"]:
                return True
    return False


def required_without_default(table):
    """Columns a legacy users table requires that minibase may not fill: they get '' instead of NULL."""
    return {
        c.name for c in table.c if c.name in PROFILE_FIELDS and not c.nullable and c.server_default is None
    }


def upsert(table, values, keys, update=None):
    """INSERT, or UPDATE the row whose `keys` match (with `update`, by default the other values; {}
    changes nothing but still locks the row): one statement on SQLite and MySQL alike."""
    dialect = db.session.get_bind().dialect.name
    if update is None:
        update = {k: v for k, v in values.items() if k not in keys}
    if dialect == "mysql":
        statement = mysql.insert(table).values(values)
        statement = statement.on_duplicate_key_update(**update or {keys[0]: values[keys[0]]})
    else:
        statement = sqlite.insert(table).values(values)
        if update:
            statement = statement.on_conflict_do_update(index_elements=keys, set_=update)
        else:
            statement = statement.on_conflict_do_nothing(index_elements=keys)
    db.session.execute(statement)


class RealtimeChange(db.Model):
    """A row inserted, updated or deleted in a table that opts in to Realtime, as the table's own
    triggers (live/capture.py) write it in the writer's transaction: the rows as JSON objects, and
    when (seconds since the epoch). Every instance's change feed reads it; it is trimmed soon."""

    __tablename__ = "minibase_realtime_changes"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    table_name: Mapped[str] = mapped_column(String(64), nullable=False)
    operation: Mapped[str] = mapped_column(String(6), nullable=False)  # INSERT, UPDATE, DELETE
    new_row = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"))
    old_row = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"))
    created_at: Mapped[float] = mapped_column(Double, nullable=False)


LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql")
ID = BigInteger().with_variant(Integer(), "sqlite")


class WebhookEvent(db.Model):
    """A change of a table some webhook listens to, written by the table's triggers (live/capture.py)
    in the writer's transaction: the outbox the deliveries are taken from (webhooks/outbox.py)."""

    __tablename__ = "minibase_webhook_events"
    __table_args__ = (
        Index("minibase_webhook_events_table", "table_name", "id"),
        Index("minibase_webhook_events_created", "created_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(64), nullable=False)
    operation: Mapped[str] = mapped_column(String(6), nullable=False)
    new_row = mapped_column(LONG_TEXT)
    old_row = mapped_column(LONG_TEXT)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)


class WebhookDelivery(db.Model):
    """One hook's delivery of one event: its payload, where it stands, and the lease of the instance
    sending it now. (hook, event_id) is unique: every instance may take the same event in, once."""

    __tablename__ = "minibase_webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("hook", "event_id", name="minibase_webhook_deliveries_once"),
        Index("minibase_webhook_deliveries_queue", "hook", "status", "event_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    hook: Mapped[str] = mapped_column(String(64), nullable=False)
    event_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(10), nullable=False)  # pending, delivered, failed
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    payload = mapped_column(LONG_TEXT, nullable=False)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)  # the change's
    next_at: Mapped[float] = mapped_column(Double, nullable=False)
    lease_until = mapped_column(Double)
    leased_by = mapped_column(String(64))
    delivered_at = mapped_column(Double)
    last_status = mapped_column(Integer)
    last_error = mapped_column(String(500))


class WebhookAttempt(db.Model):
    """One POST of a delivery: when, how long, the answer's status (none: no answer) and the error."""

    __tablename__ = "minibase_webhook_attempts"
    __table_args__ = (Index("minibase_webhook_attempts_delivery", "delivery_id"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    duration_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    status = mapped_column(Integer)
    error = mapped_column(String(500))
    instance = mapped_column(String(64))


class ScheduleRun(db.Model):
    """A schedule's run for one due time: (schedule, due_at) is unique, so however many instances
    reach that time, one of them runs it (webhooks/schedules.py)."""

    __tablename__ = "minibase_schedule_runs"
    __table_args__ = (UniqueConstraint("schedule", "due_at", name="minibase_schedule_runs_once"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    schedule: Mapped[str] = mapped_column(String(64), nullable=False)
    due_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(10), nullable=False)  # running, succeeded, failed, skipped
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    ended_at = mapped_column(Double)
    error = mapped_column(String(1000))
    instance = mapped_column(String(64))


class Callout(db.Model):
    """When a webhook or a schedule was first seen: a hook takes the changes from then on, and a
    schedule catches up on a run missed while nothing was up only if it existed then."""

    __tablename__ = "minibase_callouts"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # webhook, schedule
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    since: Mapped[float] = mapped_column(Double, nullable=False)
