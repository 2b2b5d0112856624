"""The auth API's e-mail flows: confirmation of a sign-up or an address change, recovery, magic
links and invitations, each a link token and a 6-digit code sent by mail and verified once
(verification.py redeems them).

Tokens are stored only as keyed hashes (HMAC with JWT_SECRET), so nothing in the database can be
replayed; a new token for the same user and purpose replaces the old; a code dies after
MAX_WRONG_GUESSES; a bad, used or expired token is always the same 403 otp_expired. Mail is written
to the outbox in the transaction that makes its token and sent after it commits (outbox.py): if it
cannot be sent, the token is voided and a user made for it taken back (signups.create_user)."""

import hmac
import secrets
import time
from datetime import timedelta
from urllib.parse import quote, urlencode

from sqlalchemy import delete, select, update

import turns
from auth import accounts, anonymous, hooks, outbox, pkce, signups, tokens
from auth.redirects import redirect_target
from auth.users import is_anonymous, load_user, user_object
from config import setting
from database import transactions
from database.transactions import CommitAndRaise, transactional
from errors import APIError, Auth, user_not_found, validation_failed
from extensions import db, state
from models import upsert
from models.auth import EmailSend, OneTimeToken, Profile, Session

MAX_WRONG_GUESSES = 5


TEMPLATES = {
    "reauthentication": "reauthentication",
    "signup": "confirmation",
    "recovery": "recovery",
    "magiclink": "magic_link",
    "email_change": "email_change",
    "invite": "invite",
}


# What admin/generate_link makes. An address change is confirmed once, by either link: the one for
# the current address or the one for the new address (both redeem as "email_change").
LINK_TYPES = ("signup", "invite", "magiclink", "recovery", "email_change_current", "email_change_new")


EMAIL_CHANGES = ("email_change_current", "email_change_new")


# GoTrue's authentication method of each purpose: a PKCE flow's, and its session's `amr`.
METHODS = {
    "reauthentication": "reauthentication",
    "signup": "email/signup",
    "recovery": "recovery",
    "magiclink": "magiclink",
    "email_change": "email_change",
    "invite": "invite",
}


def otp_expired():
    return APIError(403, Auth.OTP_EXPIRED, "Token has expired or is invalid")


def keyed_hash(text):
    """What the database keeps of a token, a code or an address: a copy of the database neither
    replays a token nor brute-forces a 6-digit code."""
    return tokens.keyed_hash(text, setting("JWT_SECRET"))


def code_hash(user_id, purpose, code):
    return keyed_hash(f"code:{user_id}:{purpose}:{code}")


def action_link(token, purpose, redirect_to):
    query = urlencode({"token": token, "type": purpose, "redirect_to": redirect_to}, quote_via=quote)
    return f"{setting('API_EXTERNAL_URL')}/auth/v1/verify?{query}"


def issue(user_id, purpose, email):
    """A new link token and code for (user, purpose), replacing any older one (not committed)."""
    token = secrets.token_urlsafe(32)
    code = f"{secrets.randbelow(10**6):06d}"
    now = tokens.utcnow()
    db.session.execute(
        delete(OneTimeToken).where(OneTimeToken.user_id == user_id, OneTimeToken.purpose == purpose)
    )
    db.session.add(
        OneTimeToken(
            user_id=user_id,
            purpose=purpose,
            token_hash=keyed_hash(f"link:{token}"),
            code_hash=code_hash(user_id, purpose, code),
            email=email,
            created_at=now,
            expires_at=now + timedelta(seconds=setting("OTP_EXPIRY")),
            wrong_guesses=0,
        )
    )
    db.session.flush()
    return token, code


def throttle(email):
    """One e-mail per address per EMAIL_RATE_LIMIT seconds (counted for unknown addresses too, or
    the limit would tell which addresses have accounts)."""
    if not setting("RATE_LIMITS") or not setting("EMAIL_RATE_LIMIT"):
        return
    key = keyed_hash(f"address:{email}")
    now = tokens.utcnow()
    upsert(EmailSend.__table__, {"address_key": key, "sent_at": now - timedelta(days=1)}, ["address_key"], {})
    last = db.session.execute(
        select(EmailSend.sent_at).where(EmailSend.address_key == key).with_for_update()
    ).scalar()
    wait = setting("EMAIL_RATE_LIMIT") - (now - last).total_seconds()
    if wait > 0:
        raise APIError(
            429,
            Auth.OVER_EMAIL_SEND_RATE_LIMIT,
            f"For security purposes, you can only request this after {int(wait) + 1} seconds.",
            headers={"Retry-After": str(int(wait) + 1)},
        )
    db.session.execute(update(EmailSend).where(EmailSend.address_key == key).values(sent_at=now))

    def unstamp_the_unsent_mail():  # so that a mail that could not be sent may be asked for at once
        db.session.execute(
            update(EmailSend)
            .where(EmailSend.address_key == key, EmailSend.sent_at == now)
            .values(sent_at=last)
        )

    transactions.undo_if_a_step_fails(unstamp_the_unsent_mail)


def send(purpose, user_id, email, redirect_to, challenge=None):
    """Issue a token for (user, purpose) and queue the mail of its link and code to `email`, sent
    once the caller's unit of work commits (auth.outbox): a mail that cannot be sent then is a 503
    (or the send_email hook's error), its token voided and the user made for it taken back. With a
    PKCE `challenge`, following the link ends in an auth code rather than a session."""
    pkce.start(challenge, METHODS[purpose], user_id=user_id)
    token, code = issue(user_id, purpose, email)
    target = redirect_target(redirect_to)
    link = action_link(token, purpose, target)
    # GoTrue's template variables beside our own (link, code), so that a template written for
    # Supabase works: {{ confirmation_url }}, or an app's own route with {{ token_hash }}.
    variables = {"confirmation_url": link, "token": code, "token_hash": token, "redirect_to": target}
    if hooks.enabled("send_email"):
        content = by_hook(purpose, user_id, variables)
    else:
        context = {"link": link, "code": code, **variables}
        content = {"via": "smtp", "template": TEMPLATES[purpose], "to": email, "context": context}
    token_hash = keyed_hash(f"link:{token}")

    def void_unsent_token():
        db.session.execute(delete(OneTimeToken).where(OneTimeToken.token_hash == token_hash))

    transactions.undo_if_a_step_fails(void_unsent_token)
    expires_at = tokens.utcnow() + timedelta(seconds=setting("OTP_EXPIRY"))
    outbox.queue(content, token_hash, expires_at)


def by_hook(purpose, user_id, variables):
    """The mail as the send_email hook takes it instead of SMTP, as GoTrue hands it: the user and
    GoTrue's email_data (the code as `token`, the link's token as `token_hash`, which POST /verify
    takes, and `site_url` the auth API's base, for building the link)."""
    user = {**user_object(load_user(user_id)), "id": hooks.subject(user_id)}  # new_email: a change's
    email_data = {
        "token": variables["token"],
        "token_hash": variables["token_hash"],
        "redirect_to": variables["redirect_to"],
        "email_action_type": purpose,
        "site_url": f"{setting('API_EXTERNAL_URL')}/auth/v1",
        "token_new": "",
        "token_hash_new": "",
    }
    return {"via": "hook", "user": user, "email_data": email_data}


def set_profile(user_id, **values):
    """Set `values` on the user's profile row (made if missing)."""
    upsert(Profile.__table__, {"user_id": user_id, **values}, ["user_id"])


def _new_user(email, data, password=None, unconfirmed=False):
    """A user for an e-mail flow: with `password`, or one nobody knows (they sign in by link or code,
    or set one after recovery)."""
    user_id = signups.create_user(email, password or secrets.token_urlsafe(32), data or {})
    if unconfirmed:
        set_profile(user_id, unconfirmed=True)
    return user_id


@transactional
def sign_up_unconfirmed(email, password, data, redirect_to, challenge=None):
    """Sign-up with MAILER_AUTOCONFIRM off: the user, no session, and a confirmation mail."""
    throttle(email)
    user_id = _new_user(email, data, password, unconfirmed=True)
    set_profile(user_id, confirmation_sent_at=tokens.utcnow())
    send("signup", user_id, email, redirect_to, challenge)
    return user_object(load_user(user_id))


def recover(email, redirect_to, challenge=None):
    """Mail a recovery link and code to a known, active address; the same answer, in about the same
    time, for an unknown one."""
    started = time.perf_counter()
    if transactions.write(_recover, email, redirect_to, challenge):
        cache = state()
        cache.send_seconds = 0.8 * cache.send_seconds + 0.2 * (time.perf_counter() - started)
    else:
        _take_as_long_as_a_send(started)
    return {}


def _recover(email, redirect_to, challenge):
    """Whether a recovery mail was sent (the throttle counts the address either way)."""
    throttle(email)
    found = accounts.find_credentials(email)
    if found is None or not found.active:
        return False
    set_profile(found.user_id, recovery_sent_at=tokens.utcnow())
    send("recovery", found.user_id, email, redirect_to, challenge)
    return True


def _take_as_long_as_a_send(started):
    remaining = state().send_seconds * secrets.choice((0.9, 1.0, 1.1)) - (time.perf_counter() - started)
    if remaining > 0:
        with turns.waiting():
            time.sleep(remaining)


@transactional
def magic_link(email, create_user, data, redirect_to, challenge=None):
    """POST /otp: mail a magic link and code, signing the address up first when asked."""
    throttle(email)
    found = accounts.find_credentials(email)
    if found is None:
        if not create_user:
            raise APIError(422, Auth.OTP_DISABLED, "Signups not allowed for otp")
        if setting("DISABLE_SIGNUP"):
            raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
        user_id = _new_user(email, data, unconfirmed=not setting("MAILER_AUTOCONFIRM"))
    elif not found.active:
        return {}
    else:
        user_id = found.user_id
    send("magiclink", user_id, email, redirect_to, challenge)
    return {}


@transactional
def resend(kind, email, redirect_to, challenge=None):
    """Send a sign-up's confirmation, or an address change's, again (200 {} whatever the address)."""
    throttle(email)
    if kind == "signup":
        found = accounts.find_credentials(email)
        if found is not None and token_user(found.user_id).unconfirmed:
            set_profile(found.user_id, confirmation_sent_at=tokens.utcnow())
            send("signup", found.user_id, email, redirect_to, challenge)
    else:
        user_id = db.session.execute(select(Profile.user_id).where(Profile.new_email == email)).scalar()
        if user_id is not None:
            set_profile(user_id, email_change_sent_at=tokens.utcnow())
            send("email_change", user_id, email, redirect_to, challenge)
    return {}


REAUTHENTICATION_AGE = timedelta(hours=24)  # GoTrue's: a session younger than this needs no code


@transactional
def reauthenticate(who):
    """GET /reauthenticate: a 6-digit nonce mailed to the signed-in user's (confirmed) address."""
    row = who.user
    if is_anonymous(row.email):
        raise validation_failed("Reauthentication requires the user to have an email or a phone number")
    if row.unconfirmed:
        raise APIError(422, Auth.EMAIL_NOT_CONFIRMED, "Please verify your email first.")
    throttle(row.email)
    send("reauthentication", who.user_id, row.email, None)
    return {}


def check_reauthentication(who, nonce):
    """With SECURE_PASSWORD_CHANGE, a password change from a session older than 24 hours needs the
    nonce GET /reauthenticate mailed, once (not committed: the change's transaction uses it up)."""
    if not setting("SECURE_PASSWORD_CHANGE"):
        return
    created = db.session.execute(select(Session.created_at).where(Session.id == who.session_id)).scalar()
    if created is not None and tokens.utcnow() - created < REAUTHENTICATION_AGE:
        return
    if not nonce:
        raise APIError(400, Auth.REAUTHENTICATION_NEEDED, "Password update requires reauthentication")
    found = db.session.execute(
        select(OneTimeToken)
        .where(OneTimeToken.user_id == who.user_id, OneTimeToken.purpose == "reauthentication")
        .with_for_update()
    ).scalar_one_or_none()
    invalid = APIError(422, Auth.REAUTHENTICATION_NOT_VALID, "Nonce has expired or is invalid")
    if found is None or found.expires_at <= tokens.utcnow() or found.wrong_guesses >= MAX_WRONG_GUESSES:
        raise invalid
    if not hmac.compare_digest(found.code_hash, code_hash(who.user_id, "reauthentication", nonce)):
        found.wrong_guesses += 1
        raise CommitAndRaise(invalid)  # the guess is counted
    db.session.delete(found)  # single use


def change_email(user_id, new_email, redirect_to):
    """An address change with MAILER_AUTOCONFIRM off: the new address gets a link, and the change
    happens when it is followed; `new_email` shows it meanwhile (not committed)."""
    _record_email_change(user_id, new_email)
    throttle(new_email)
    send("email_change", user_id, new_email, redirect_to)


def _record_email_change(user_id, new_email):
    """`new_email` awaits its confirmation (a 422 when another user has it)."""
    found = accounts.find_credentials(new_email)
    if found is not None and found.user_id != user_id:
        raise accounts.email_exists()
    accounts.check_lengths({"email": new_email})
    set_profile(user_id, new_email=new_email, email_change_sent_at=tokens.utcnow())


@transactional
def update_user(who, fields, redirect_to):
    """PATCH/PUT /user: a password change may need the reauthentication nonce first; with
    MAILER_AUTOCONFIRM off a new address is confirmed by mail; the rest is accounts.change_user's."""
    nonce = fields.pop("nonce", None)
    anonymous.check_update(who, fields)
    accounts.require_aal2_for_credentials(who, fields)
    if "password" in fields:
        check_reauthentication(who, nonce)
    if "email" in fields and not setting("MAILER_AUTOCONFIRM"):
        return update_user_confirming_email(who, fields, redirect_to)
    accounts.change_user(who.user_id, fields, keep_session=who.session_id)
    if "email" in fields and is_anonymous(who.user.email):
        anonymous.converted(who.user_id, fields["email"])
    return accounts.current_user(who.user_id)


def update_user_confirming_email(who, fields, redirect_to):
    """PATCH /user with MAILER_AUTOCONFIRM off: every other field changes now, the address only when
    the link mailed to it is followed."""
    new_email = fields.pop("email")
    accounts.change_user(who.user_id, fields, keep_session=who.session_id)
    if new_email != (who.user.email or "").strip().lower():
        change_email(who.user_id, new_email, redirect_to)
    return user_object(load_user(who.user_id))


def token_user(user_id):
    """The user a token or code was issued for: a 403 otp_expired when they are gone."""
    row = load_user(user_id)
    if row is None:
        raise otp_expired()
    return row


@transactional
def generate_link(kind, email, password=None, data=None, redirect_to=None, new_email=None):
    """POST /admin/generate_link: the user (made for signup and invite when new) and a link and code
    for them, returned rather than sent."""
    if kind not in LINK_TYPES:
        raise validation_failed(f"type: must be one of {', '.join(LINK_TYPES)}")
    if kind in EMAIL_CHANGES and not new_email:
        raise validation_failed("new_email: required to generate an email change link")
    found = accounts.find_credentials(email)
    if found is not None:
        user_id = found.user_id
    elif kind == "signup":
        if not password:
            raise validation_failed("password: required to generate a signup link")
        user_id = _new_user(email, data, password, unconfirmed=not setting("MAILER_AUTOCONFIRM"))
    elif kind == "invite":
        user_id = _new_user(email, data, unconfirmed=True)
    else:
        raise user_not_found()
    purpose = kind
    if kind == "invite":
        set_profile(user_id, invited_at=tokens.utcnow())
    elif kind in EMAIL_CHANGES:
        _record_email_change(user_id, new_email)
        purpose = "email_change"
    target = redirect_target(redirect_to)
    token, code = issue(user_id, purpose, new_email if kind in EMAIL_CHANGES else email)
    return {
        **user_object(load_user(user_id)),
        "action_link": action_link(token, purpose, target),
        "email_otp": code,
        "hashed_token": token,
        "verification_type": kind,
        "redirect_to": target,
    }


@transactional
def invite(email, data, redirect_to):
    """POST /invite: a new user, who accepts by following the mailed link."""
    if accounts.find_credentials(email) is not None:
        raise accounts.email_exists()
    throttle(email)
    user_id = _new_user(email, data, unconfirmed=True)
    set_profile(user_id, invited_at=tokens.utcnow())
    send("invite", user_id, email, redirect_to)
    return user_object(load_user(user_id))
