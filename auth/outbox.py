"""Mail that leaves after its commit. Each e-mail an auth flow sends (through SMTP, or the send_email
hook) is first a row of minibase_mail_outbox, written in the unit of work that issues its token; it
is sent only once that unit has committed, by whoever holds the row's lease, which a conditional
UPDATE hands to one sender at a time:

- the request that wrote the row holds its lease from the start and sends once its unit has
  committed, then answers with the outcome: a mail that could not be sent voids its token (the
  caller's undo) and drops the row, and the request is the 503 (or the hook's error) it always was;
- a sender thread in each serving process (`start_sender`) takes the rows whose lease ran out: their
  writer died between its commit and the send, or could not record the send. Of several processes
  or instances, one claims a row; the others skip it.

So a retried unit never sends twice (its attempts only write the row), and a crash never loses a
mail: the row waits for a sender. A crash after the mail server took the mail and before the row was
deleted sends it again once the lease runs out: delivery is at least once. The row holds the mail's
content sealed (auth.encryption) and is deleted once sent; one never sent is dropped when its token
expires, its link being dead by then."""

import json
import logging
import threading
import uuid
from datetime import timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import DBAPIError

from auth import encryption, hooks, mail, tokens
from config import setting
from database import failures, transactions
from errors import APIError
from extensions import db
from models.auth import OutgoingMail

log = logging.getLogger("minibase")

BATCH = 20  # rows a sender looks at per round
MAX_INTERVAL = 5.0  # seconds between a sender's rounds, at most


def _lease():
    return timedelta(seconds=setting("MAIL_LEASE"))


def queue(content, token_hash, expires_at):
    """Write the mail `content` (what `send` takes) in the running unit of work, held by this
    request, and send it once the unit commits (transactions.after_commit): an APIError then, when
    it cannot be sent, after the unit's undos have run."""
    now = tokens.utcnow()
    claimant = uuid.uuid4().hex
    sealed = encryption.seal(json.dumps(content, separators=(",", ":")), token_hash)
    row_id = db.session.execute(
        insert(OutgoingMail).values(
            token_hash=token_hash,
            content=sealed,
            created_at=now,
            expires_at=expires_at,
            claimed_by=claimant,
            lease_until=now + _lease(),
            attempts=1,
        )
    ).inserted_primary_key[0]

    def send_queued_mail():
        if not transactions.write(_renew, row_id, claimant):
            return  # the lease ran out before the commit, and another sender has the mail
        send(content)
        transactions.after_other_service()  # a slow mail server leaves the record of its send its time
        _sent(row_id, claimant)

    def drop_unsent_mail():
        db.session.execute(delete(OutgoingMail).where(OutgoingMail.id == row_id))

    transactions.after_commit(send_queued_mail)
    transactions.undo_if_a_step_fails(drop_unsent_mail)


def _renew(row_id, claimant):
    """Whether `claimant` still holds the row (nobody took it since), its lease renewed."""
    renewed = db.session.execute(
        update(OutgoingMail)
        .where(OutgoingMail.id == row_id, OutgoingMail.claimed_by == claimant)
        .values(lease_until=tokens.utcnow() + _lease())
    )
    return renewed.rowcount == 1


def _sent(row_id, claimant):
    """Forget a sent mail. A database that fails here leaves the row, sent again after its lease:
    logged, and no error for a request whose mail did leave."""
    try:
        transactions.write(_delete, row_id, claimant)
    except DBAPIError as exc:
        log.error("mail %s was sent but not recorded as sent (%s): it may be sent again", row_id,
                  failures.describe(exc))  # fmt: skip


def _delete(row_id, claimant):
    db.session.execute(
        delete(OutgoingMail).where(OutgoingMail.id == row_id, OutgoingMail.claimed_by == claimant)
    )


def send(content):
    """Hand `content` to the send_email hook or to SMTP, as it was written; an APIError when it
    could not be sent."""
    if content["via"] == "hook":
        hooks.send_email(content["user"], content["email_data"])
    else:
        mail.send(mail.compose(content["template"], content["to"], **content["context"]))


# --- the sender of what was left


def send_pending(claimant):
    """Send the mails whose lease ran out, each claimed first by a conditional UPDATE (of several
    senders, one gets it); drop those whose token expired. How many were sent."""
    now = tokens.utcnow()
    expired = transactions.write(_drop_expired, now)
    if expired:
        log.warning("%d e-mails were never sent before their links expired: dropped", expired)
    waiting = transactions.read(_waiting, now)
    sent = 0
    for row_id in waiting:
        content = transactions.write(_claim, row_id, claimant)
        if content is None:
            continue  # another sender claimed it first
        try:
            send(content)
        except APIError:
            continue  # logged by mail/hooks; tried again once this lease runs out
        _sent(row_id, claimant)
        sent += 1
    return sent


def _drop_expired(now):
    return db.session.execute(delete(OutgoingMail).where(OutgoingMail.expires_at <= now)).rowcount


def _waiting(now):
    found = select(OutgoingMail.id).where(OutgoingMail.lease_until < now).order_by(OutgoingMail.id)
    return db.session.execute(found.limit(BATCH)).scalars().all()


def _claim(row_id, claimant):
    """The row's content, opened, if `claimant` took its lease (it had run out); else None."""
    now = tokens.utcnow()
    taken = db.session.execute(
        update(OutgoingMail)
        .where(OutgoingMail.id == row_id, OutgoingMail.lease_until < now)
        .values(claimed_by=claimant, lease_until=now + _lease(), attempts=OutgoingMail.attempts + 1)
    ).rowcount
    if taken != 1:
        return None
    row = db.session.execute(
        select(OutgoingMail.token_hash, OutgoingMail.content).where(OutgoingMail.id == row_id)
    ).one()
    try:
        return json.loads(encryption.unseal(row.content, row.token_hash))
    except encryption.SealError:  # sealed under a key no longer configured: it can never be sent
        log.error("mail %s is sealed under a key that is no longer configured: dropped", row_id)
        db.session.execute(delete(OutgoingMail).where(OutgoingMail.id == row_id))
        return None


def interval():
    """Seconds between a sender's rounds: a quarter of the lease, at most MAX_INTERVAL."""
    return max(0.1, min(MAX_INTERVAL, setting("MAIL_LEASE") / 4))


def start_sender(app):
    """Start this process's sender thread for `app`: it sends what was left at once, then every
    interval(). Returns the Event that stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=_send_until, args=(app, stop), name="mail sender", daemon=True)
    thread.start()
    return stop


def _send_until(app, stop):
    claimant = uuid.uuid4().hex
    with app.app_context():
        pause = interval()
        while True:
            try:
                send_pending(claimant)
            except DBAPIError as exc:
                log.warning("sending pending e-mail: the database is not answering (%s)",
                            failures.describe(exc))  # fmt: skip
            except Exception:
                log.exception("sending pending e-mail failed")
            try:
                transactions.end_session()
            except DBAPIError:
                pass  # the connection died: invalidated, and the next round makes another
            if stop.wait(pause):
                return
