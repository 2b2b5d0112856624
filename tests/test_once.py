"""Side effects that happen once: auth hooks and mail are called outside the units of work that
database.transactions retries, and mail leaves from the outbox after the commit. Retries are forced
for real on MariaDB: a trigger makes the database refuse a statement once with error 1213, a deadlock,
as InnoDB would (its count kept in a MyISAM table, which a rollback does not undo). The hook server
and the SMTP server are real (http.server, aiosmtpd); each call and each mail is counted."""

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pyotp
import pytest
import requests
from aiosmtpd.controller import Controller

from auth import encryption, outbox, tokens
from database import transactions
from extensions import db
from hook_server import HOOK_SECRET, HookServer
from mail_server import Inbox, link_and_code
from models.auth import OutgoingMail
from support import SECRET, Api, assert_auth_error, free_port, refuse_once


@pytest.fixture
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    inbox.port = controller.port
    yield inbox
    controller.stop()


@pytest.fixture
def hook():
    server = HookServer()
    yield server
    server.stop()


def change(**values):
    """A custom_access_token hook's answer: the claims it was sent, with `values` added."""

    def answer(payload):
        return 200, "application/json", json.dumps({"claims": {**payload["claims"], **values}}).encode()

    return answer


def mailing(smtp, **settings):
    return {"SMTP_HOST": "127.0.0.1", "SMTP_PORT": smtp.port, "SMTP_SECURITY": "none", **settings}


def hooking(hook, *names):
    settings = {}
    for name in names:
        prefix = f"HOOK_{name.upper()}"
        settings |= {f"{prefix}_ENABLED": True, f"{prefix}_URI": hook.url, f"{prefix}_SECRETS": HOOK_SECRET}
    return settings


def count(app, table):
    with app.app_context(), db.engine.connect() as connection:
        return connection.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar()


mysql_only = pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])


@mysql_only
@pytest.mark.parametrize("table", ["minibase_refresh_tokens", "minibase_audit_log"])
def test_a_sign_in_retried_after_a_deadlock_asks_the_token_hook_once(make_app, anon_key, hook, table):
    api = Api(make_app(**hooking(hook, "custom_access_token")), anon_key)
    hook.answer = change(user_role="editor")
    api.sign_up()
    calls = len(hook.calls)
    left = refuse_once(api.app, table)
    signed_in = api.sign_in()
    assert signed_in.status_code == 200, signed_in.json
    assert left() == 0  # the unit was refused once, and ran again
    assert len(hook.calls) == calls + 1
    claims = tokens.decode_access_token(signed_in.json["access_token"], api.app.config["JWT_KEYS"])
    assert (
        claims["user_role"] == "editor"
        and claims["session_id"] == hook.calls[-1]["payload"]["claims"]["session_id"]
    )


@mysql_only
def test_a_sign_up_retried_asks_before_user_created_once(make_app, anon_key, hook):
    api = Api(make_app(**hooking(hook, "before_user_created")), anon_key)
    left = refuse_once(api.app, "minibase_sessions")
    api.sign_up()
    assert left() == 0 and len(hook.calls) == 1


@mysql_only
@pytest.mark.parametrize(
    "table", ["minibase_one_time_tokens", "minibase_mail_outbox", "minibase_email_sends"]
)
def test_a_recovery_retried_after_a_deadlock_sends_one_mail(make_app, anon_key, smtp, table):
    api = Api(make_app(**mailing(smtp, EMAIL_RATE_LIMIT=60, RATE_LIMITS=True)), anon_key)
    api.sign_up()
    left = refuse_once(api.app, table)
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    assert left() == 0
    assert len(smtp.messages) == 1
    _, code = link_and_code(smtp.last())
    verified = api.post(
        "/auth/v1/verify", json={"type": "recovery", "email": "ann@example.com", "token": code}
    )
    assert verified.status_code == 200
    assert count(api.app, "minibase_mail_outbox") == 0  # sent: forgotten


@mysql_only
def test_a_retried_mail_through_the_send_email_hook_is_one_call(make_app, anon_key, hook):
    api = Api(make_app(**hooking(hook, "send_email")), anon_key)
    api.sign_up()
    left = refuse_once(api.app, "minibase_mail_outbox")
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    assert left() == 0 and len(hook.calls) == 1
    assert hook.calls[0]["payload"]["email_data"]["email_action_type"] == "recovery"


def approve_both(payload):
    if payload["metadata"]["name"] == "customize-access-token":
        return change()(payload)
    return 200, "application/json", json.dumps({"decision": "continue"}).encode()


@mysql_only
def test_an_mfa_verification_retried_asks_each_hook_once(make_app, anon_key, hook):
    """The step-up writes its refresh token after the verification hook has answered: a deadlock
    there runs the unit again, which must not ask either hook again."""
    api = Api(make_app(**hooking(hook, "mfa_verification_attempt", "custom_access_token")), anon_key)
    hook.answer = approve_both
    token = api.sign_up()["access_token"]
    enrolled = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp"}).json
    challenge = api.post(f"/auth/v1/factors/{enrolled['id']}/challenge", token=token).json["id"]
    before = len(hook.calls)
    left = refuse_once(api.app, "minibase_refresh_tokens")
    code = pyotp.TOTP(enrolled["totp"]["secret"]).now()
    verified = api.post(
        f"/auth/v1/factors/{enrolled['id']}/verify",
        token=token,
        json={"challenge_id": challenge, "code": code},
    )
    assert verified.status_code == 200, verified.json
    assert left() == 0
    names = [call["payload"]["metadata"]["name"] for call in hook.calls[before:]]
    assert sorted(names) == ["customize-access-token", "mfa-verification"]
    assert (
        tokens.decode_access_token(verified.json["access_token"], api.app.config["JWT_KEYS"])["aal"] == "aal2"
    )


def test_a_refused_token_takes_back_the_sign_up_and_its_session(make_app, anon_key, hook):
    api = Api(make_app(**hooking(hook, "custom_access_token")), anon_key)
    hook.json({"error": {"http_code": 403, "message": "Not today"}})
    response = api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"})
    assert_auth_error(response, 403, "unknown")
    assert count(api.app, "users") == 0 and count(api.app, "minibase_sessions") == 0
    assert count(api.app, "minibase_refresh_tokens") == 0


def test_a_refused_refresh_leaves_the_presented_token_valid(make_app, anon_key, hook):
    api = Api(make_app(**hooking(hook, "custom_access_token")), anon_key)
    hook.answer = change()
    session = api.sign_up()
    hook.json({"error": {"http_code": 403, "message": "Not now"}})
    refresh = {"refresh_token": session["refresh_token"]}
    assert_auth_error(api.post("/auth/v1/token?grant_type=refresh_token", json=refresh), 403, "unknown")
    hook.answer = change()
    again = api.post("/auth/v1/token?grant_type=refresh_token", json=refresh)
    assert again.status_code == 200 and again.json["access_token"]


def test_the_hook_is_asked_with_no_connection_held(make_app, anon_key, hook):
    """While the custom_access_token hook thinks, the unit of work has committed: its connection is
    back in the pool, and what it wrote is there for another connection to read."""
    app = make_app(**hooking(hook, "custom_access_token"))
    api = Api(app, anon_key)
    seen = []

    def look(payload):
        with app.app_context():
            checked_out = db.engine.pool.checkedout()
            with db.engine.connect() as connection:
                sessions = connection.exec_driver_sql("SELECT COUNT(*) FROM minibase_sessions").scalar()
        seen.append((checked_out, sessions))
        return change()(payload)

    hook.answer = look
    api.sign_up()
    assert seen == [(0, 1)]


def test_a_mail_not_sent_voids_its_token_and_leaves_no_row(make_app, anon_key, smtp):
    api = Api(make_app(**mailing(smtp)), anon_key)
    api.sign_up()
    smtp.refuse = True
    assert_auth_error(
        api.post("/auth/v1/recover", json={"email": "ann@example.com"}), 503, "email_send_failed"
    )
    assert count(api.app, "minibase_one_time_tokens") == 0 and count(api.app, "minibase_mail_outbox") == 0
    assert count(api.app, "users") == 1  # the user was not made for the mail: kept


def test_pending_mail_is_sent_once_by_racing_senders(make_app, anon_key, smtp):
    """Rows whose lease ran out (their request died after its commit), sent by four senders at once,
    as four processes would: each mail leaves once."""
    app = make_app(**mailing(smtp))
    addresses = ["ann@example.com", "bob@example.com", "cy@example.com"]
    for address in addresses:
        left_unsent(app, address)
    barrier = threading.Barrier(4)
    sent = []

    def sender(n):
        with app.app_context():
            barrier.wait()
            sent.append(outbox.send_pending(f"sender{n}"))
            transactions.end_session()

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(sent) == 3 and sorted(m["To"] for m in smtp.messages) == addresses
    assert count(app, "minibase_mail_outbox") == 0
    time.sleep(0.1)
    assert len(smtp.messages) == 3


def left_unsent(app, address):
    """The outbox row a request that died right after its commit leaves: a recovery mail to
    `address`, sealed as outbox.queue seals it, its lease run out."""
    token_hash = "h" * 60 + address[:4]
    context = {"link": "https://x/verify", "code": "123456", "confirmation_url": "https://x/verify",
               "token": "123456", "token_hash": "t", "redirect_to": "https://x/"}  # fmt: skip
    content = {"via": "smtp", "template": "recovery", "to": address, "context": context}
    now = tokens.utcnow()
    with app.app_context():
        db.session.add(
            OutgoingMail(
                token_hash=token_hash,
                content=encryption.seal(json.dumps(content), token_hash),
                created_at=now,
                expires_at=now + timedelta(hours=1),
                claimed_by="died",
                lease_until=now - timedelta(seconds=1),
                attempts=1,
            )
        )
        db.session.commit()


# --- a real process killed between its commit and its send (the slow tier: it starts wsgi.py)


ROOT = Path(__file__).resolve().parent.parent


def serve(tmp_path, database_url, smtp, name):
    """`python wsgi.py` (waitress) on `database_url`, mailing through `smtp` with a one-second
    lease; (process, base URL) once it answers."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "JWT_SECRET": SECRET,
        "PORT": str(port),
        "REALTIME": "off",
        "RATE_LIMITS": "off",
        "BCRYPT_ROUNDS": "4",
        "MAIL_LEASE": "1",
        **{key: str(value) for key, value in mailing(smtp).items()},
    }
    log = open(tmp_path / f"{name}.log", "w")
    process = subprocess.Popen(
        [sys.executable, "wsgi.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log
    )
    process.log = log
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{base}/health", timeout=1)
            return process, base
        except requests.RequestException:
            assert process.poll() is None and time.monotonic() < deadline, f"{name} did not start"
            time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def test_a_mail_whose_sender_was_killed_is_sent_once_by_the_instances_left(
    make_app, database_url, anon_key, smtp, tmp_path
):
    """An instance is killed (SIGKILL) as the mail server is sent a recovery mail it has committed:
    the mail did not leave. Two instances started afterwards find it, and it leaves once."""
    Api(make_app(), anon_key).sign_up()  # the database migrated, and ann in it
    started = []
    try:
        first, base = serve(tmp_path, database_url, smtp, "first")
        started.append(first)
        killed = threading.Event()
        taken = smtp.handle_DATA

        async def kill_the_sender(server, session, envelope):
            if not killed.is_set():
                first.kill()  # the committed mail is on the wire: its process dies before it is taken
                killed.set()
                return "451 4.3.0 try again later"
            return await taken(server, session, envelope)

        smtp.handle_DATA = kill_the_sender
        with pytest.raises(requests.ConnectionError):
            requests.post(f"{base}/auth/v1/recover", json={"email": "ann@example.com"},
                          headers={"apikey": anon_key}, timeout=30)  # fmt: skip
        first.wait(timeout=10)
        assert killed.is_set() and smtp.messages == []
        app = make_app()
        assert count(app, "minibase_mail_outbox") == 1 and count(app, "minibase_one_time_tokens") == 1
        for name in ("second", "third"):
            started.append(serve(tmp_path, database_url, smtp, name)[0])
        deadline = time.monotonic() + 30
        while not smtp.messages and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.5)  # more than two leases: a second sender would have sent it by now
        assert len(smtp.messages) == 1 and count(app, "minibase_mail_outbox") == 0
        _, code = link_and_code(smtp.last("ann@example.com"))
        body = {"type": "recovery", "email": "ann@example.com", "token": code}
        assert Api(app, anon_key).post("/auth/v1/verify", json=body).status_code == 200
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=10)
            process.log.close()


def test_a_mail_not_sent_may_be_asked_for_again_at_once(make_app, anon_key, smtp):
    """The rate limit's stamp is taken back with the token: the client's retry is no 429."""
    api = Api(make_app(**mailing(smtp, RATE_LIMITS=True, EMAIL_RATE_LIMIT=60)), anon_key)
    api.sign_up()
    smtp.refuse = True
    assert_auth_error(
        api.post("/auth/v1/recover", json={"email": "ann@example.com"}), 503, "email_send_failed"
    )
    smtp.refuse = False
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    assert len(smtp.messages) == 1
    assert_auth_error(
        api.post("/auth/v1/recover", json={"email": "ann@example.com"}), 429, "over_email_send_rate_limit"
    )
