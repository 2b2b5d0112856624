"""Password sign-in: the failed attempts counted per (client IP, account) in the database, the
password checked outside any transaction against the stored hash (or a dummy one, at the same
cost), the password_verification_attempt hook, then the session."""

import hashlib
import threading
import zlib
from collections import Counter
from datetime import timedelta

from limits import parse as parse_limit
from sqlalchemy import delete, select, update

from auth import audit, hooks, sessions, tokens
from auth.accounts import find_credentials, too_many
from auth.passwords import (
    dummy_hash,
    family,
    hash_cost,
    hash_password,
    needs_rehash,
    verifiable,
    verify_password,
)
from auth.users import is_banned
from config import setting
from database import transactions
from database.transactions import CommitAndRaise
from errors import APIError, Auth, invalid_credentials, user_banned, user_inactive
from extensions import db, state
from models import upsert, users_table
from models.auth import FailedSignIn, Profile, Session

FAILED_SIGN_INS = parse_limit("10 per 15 minutes")
MAX_DUMMY_COST = 16  # a stored hash of absurd cost must not make every unknown address that slow


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
