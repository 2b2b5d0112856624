"""The auth API's tables: sessions and refresh tokens, profiles, one-time tokens and the mail they
send, MFA factors and challenges, providers' identities and flows, passkeys, the guards of sign-up
and sign-in, the audit log, and the dashboard's sessions."""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from extensions import db


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
