"""turns.py: on SQLite one request at a time runs Python, the others wait their turn in the order
they came; one that waits outside the process (bcrypt) gives its turn to the next while it does;
one stuck holding its turn holds the others up for at most turns.PATIENCE, then they run beside it.
Measured by what happens, not by timing: who holds the turn, in which order, how many waited out."""

import sqlite3
import threading
import time

import bcrypt
import pytest
import requests
import sqlalchemy as sa

import turns
from extensions import db
from support import eventually, serve_with_realtime


def test_the_turn_goes_to_the_waiters_in_the_order_they_came():
    queue = turns.Turns()
    assert queue.take(1)
    order = []
    threads = []
    for n in range(5):
        thread = threading.Thread(target=lambda n=n: (queue.take(10), order.append(n), queue.give()))
        thread.start()
        threads.append(thread)
        eventually(lambda n=n: len(queue._waiting) == n + 1, 5, 0.001, f"waiter {n} waits")
    queue.give()
    for thread in threads:
        thread.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert not queue._held and not queue._waiting


def test_one_that_gives_up_its_turn_and_asks_again_goes_behind_those_waiting():
    """A pool thread that ends a request and takes the next at once cannot jump the queue: with a
    plain semaphore it could, again and again, and the one waiting ran only once its patience ran out."""
    queue = turns.Turns()
    assert queue.take(1)
    order = []
    waiter = threading.Thread(target=lambda: (queue.take(10), order.append("waiter"), queue.give()))
    waiter.start()
    eventually(lambda: len(queue._waiting) == 1, 5, 0.001, "the waiter waits")
    queue.give()
    assert queue.take(10)
    order.append("again")
    queue.give()
    waiter.join(10)
    assert order == ["waiter", "again"]


def test_a_turn_not_given_within_the_patience_is_not_waited_for_and_is_counted():
    queue = turns.Turns()
    assert queue.take(1)
    before = queue.waited_out
    assert queue.take(0.02) is False
    assert queue.waited_out == before + 1 and not queue._waiting  # it left the queue
    queue.give()
    assert queue.take(0) and queue._held  # the turn was never lost nor doubled
    queue.give()
    assert not queue._held


def test_a_turn_held_past_the_patience_is_not_waited_for():
    """A request stuck in its turn (a lock no give-up covers) holds up those that came in its first
    `patience` seconds; one that comes later runs at once, counted, and the turn stays the holder's."""
    queue = turns.Turns()
    assert queue.take(1)
    queue._since -= 60  # taken a minute ago
    asked = time.monotonic()
    assert queue.take(30) is False
    assert time.monotonic() - asked < 10, "it waited for the stuck holder"
    assert queue.waited_out == 1 and not queue._waiting and queue._held
    queue.give()
    assert not queue._held


def test_one_turn_at_a_time_when_patience_runs_out_as_the_turn_is_handed_over():
    """Eight threads take and give the turn as fast as they can, with patience so short that many
    run out just as the turn comes to them: every take that says True is the only holder, and at the
    end the one turn is free again, with no waiter left behind."""
    queue = turns.Turns()
    holders, most, lock = [0], [0], threading.Lock()

    def churn():
        for n in range(1000):
            if queue.take(0.0001 * (n % 4)):
                with lock:
                    holders[0] += 1
                    most[0] = max(most[0], holders[0])
                time.sleep(0.0001 * (n % 2))  # held a while: the others queue up
                with lock:
                    holders[0] -= 1
                queue.give()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert most[0] == 1
    assert not queue._held and not queue._waiting
    assert queue.waited_out > 0  # the race this test is about did happen


def test_waiting_gives_the_turn_to_the_next_and_takes_it_back_behind_it(monkeypatch):
    monkeypatch.setattr(turns, "PATIENCE", 30)  # the first waits for its turn back, however slow the machine
    queue = turns.Turns()
    order = []
    inside = threading.Event()
    other_ran = threading.Event()

    def first():
        with turns.turn(queue):
            inside.set()
            with turns.waiting():
                other_ran.wait(10)
                order.append("first waited")
            order.append("first again")

    def second():
        inside.wait(10)
        with turns.turn(queue):
            order.append("second")
            other_ran.set()
            eventually(lambda: len(queue._waiting) == 1, 5, 0.001, "the first, back, waits for its turn")
            order.append("second done")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert order == ["second", "first waited", "second done", "first again"]
    assert not queue._held


def test_waiting_outside_a_turn_does_nothing():
    assert not turns.held()
    with turns.waiting():
        assert not turns.held()
    with turns.turn(turns.Turns()):
        assert turns.held()
        with turns.turn():  # a call within a call keeps the one turn
            assert turns.held()
        assert turns.held()
    assert not turns.held()


# --- served


@pytest.fixture
def backend():
    return "sqlite"  # requests take turns on SQLite only (runtime.server.in_turns)


@pytest.fixture
def served_sqlite(app):
    port, stop = serve_with_realtime(app)
    yield f"http://127.0.0.1:{port}"
    stop()


def test_a_sign_in_in_bcrypt_lets_other_requests_run(app, served_sqlite, anon_key):
    """A password checked at cost 12 (about a quarter of a second, outside the interpreter): the
    requests sent meanwhile run in their turns at once, none waits its patience out."""
    headers = {"apikey": anon_key}
    account = {"email": "slow@example.com", "password": "secret-pw"}
    signed_up = requests.post(f"{served_sqlite}/auth/v1/signup", headers=headers, json=account, timeout=10)
    assert signed_up.status_code == 200, signed_up.text
    costly = bcrypt.hashpw(b"secret-pw", bcrypt.gensalt(rounds=12)).decode()
    with app.app_context():
        db.session.execute(sa.text("UPDATE users SET password = :h WHERE email = :e"),
                           {"h": costly, "e": "slow@example.com"})  # fmt: skip
        db.session.commit()
    answers = []

    def sign_in():
        url = f"{served_sqlite}/auth/v1/token?grant_type=password"
        answers.append(requests.post(url, headers=headers, json=account, timeout=30))

    before = turns.TURNS.waited_out
    signing_in = threading.Thread(target=sign_in)
    signing_in.start()
    during = 0
    while signing_in.is_alive():
        assert requests.get(f"{served_sqlite}/rest/v1/", headers=headers, timeout=10).status_code == 200
        during += signing_in.is_alive()
    signing_in.join()
    assert answers[0].status_code == 200, answers[0].text
    assert during >= 3, "the sign-in ended before the reads could run beside it"
    # Had the sign-in kept its turn through bcrypt, every read sent meanwhile would have waited its
    # patience out. One may still, on a machine so busy that a read's thread lost the core for 50 ms.
    assert turns.TURNS.waited_out - before <= during // 3


def test_a_request_stuck_in_its_turn_holds_the_others_up_for_the_patience_only(
    app, served_sqlite, anon_key, tmp_path
):
    """A sign-up whose INSERT waits for SQLite's write lock (another process's transaction holds it)
    keeps its turn while it waits. A read sent meanwhile waits out its patience, runs beside it and
    is answered before the sign-up is; once the lock is let go the sign-up is written."""
    headers = {"apikey": anon_key}
    path = app.config["DATABASE_URL"].removeprefix("sqlite:///")
    holder = sqlite3.connect(path, isolation_level=None, timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    answers = []

    def sign_up():
        account = {"email": "later@example.com", "password": "secret-pw"}
        url = f"{served_sqlite}/auth/v1/signup"
        answers.append(requests.post(url, headers=headers, json=account, timeout=30))

    before = turns.TURNS.waited_out
    signing_up = threading.Thread(target=sign_up)
    try:
        signing_up.start()

        def a_read_waited_out():
            assert requests.get(f"{served_sqlite}/rest/v1/", headers=headers, timeout=10).status_code == 200
            return turns.TURNS.waited_out > before

        eventually(a_read_waited_out, 10, 0.01, "a read waited out its patience beside the stuck sign-up")
        assert signing_up.is_alive(), "the sign-up did not wait for the lock"
    finally:
        holder.rollback()
        holder.close()
    signing_up.join(30)
    assert answers[0].status_code == 200, answers[0].text
    with app.app_context():
        found = db.session.execute(sa.text("SELECT count(*) FROM users WHERE email = 'later@example.com'"))
        assert found.scalar() == 1
