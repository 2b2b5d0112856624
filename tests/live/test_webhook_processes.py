"""Webhooks and schedules in real `python wsgi.py` processes, with the faults made to happen: the
instance SIGKILLed in the middle of a POST (the change still arrives, after another start), the
receiver down and then back (everything arrives, in order), and a `* * * * *` schedule on two
instances over three minutes (exactly three runs). Slow tier: processes and minutes."""

import json
import signal
import time
from datetime import UTC, datetime

import sqlalchemy as sa

from receiver import SECRET, Receiver
from support import eventually, free_port

FAST = {"WEBHOOK_POLL_SECONDS": 0.05, "WEBHOOK_RETRY_SECONDS": 0.2, "REALTIME": "off"}
SHORT_LEASE = "import webhooks.outbox as o; o.LEASE_MARGIN = 0.5"


def make_orders(url):
    auto = "AUTO_INCREMENT" if url.startswith("mysql") else "AUTOINCREMENT"
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE TABLE orders (id INTEGER PRIMARY KEY {auto}, item VARCHAR(50))")
        connection.exec_driver_sql("CREATE TABLE ticks (n INTEGER)")
    engine.dispose()


def write(url, *items):
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        for item in items:
            connection.exec_driver_sql(f"INSERT INTO orders (item) VALUES ('{item}')")
    engine.dispose()


def hook_ready(url):
    """Whether the instance's hook thread has made the triggers of `orders` (changes before are
    not the hook's)."""
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        if url.startswith("sqlite"):
            query = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'minibase_wh_%'"
        else:
            query = (
                "SELECT count(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "
                "AND TRIGGER_NAME LIKE 'minibase\\_wh\\_%%'"
            )
        made = connection.exec_driver_sql(query).scalar() == 3
    engine.dispose()
    return made


def hook(url, timeout=2):
    return f'[webhooks.out]\ntable = "orders"\nurl = "{url}"\nsecret = "{SECRET}"\ntimeout = {timeout}\n'


def in_order(receiver):
    """The items received, each message once (a resent copy has the same webhook-id)."""
    seen, items = set(), []
    for call in receiver.calls:
        if 200 <= call["status"] < 300 and call["headers"]["webhook-id"] not in seen:
            seen.add(call["headers"]["webhook-id"])
            items.append(call["payload"]["record"]["item"])
    return items


def test_an_instance_killed_mid_delivery_leaves_the_change_to_the_next_start(
    start_server, database_url, lay_migrated
):
    lay_migrated({})
    make_orders(database_url)
    receiver = Receiver()
    posting = {"c": 0}

    def answer(call):
        if call["payload"]["record"]["item"] == "c" and not posting["c"]:
            posting["c"] = 1
            time.sleep(1.5)  # the instance is killed while it waits for this answer
        return 200

    receiver.answer = answer
    try:
        first = start_server(hook(receiver.url), prelude=SHORT_LEASE, **FAST)
        eventually(lambda: hook_ready(database_url), 30)
        write(database_url, "a", "b", "c", "d", "e")
        assert eventually(lambda: posting["c"], 20)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
        assert in_order(receiver) == ["a", "b"]
        start_server(hook(receiver.url), prelude=SHORT_LEASE, **FAST)
        assert eventually(lambda: in_order(receiver) == ["a", "b", "c", "d", "e"], 30), in_order(receiver)
        assert all(call["verified"] for call in receiver.calls)
    finally:
        receiver.stop()


def test_a_receiver_down_and_back_gets_everything_in_order(start_server, database_url, lay_migrated):
    lay_migrated({})
    make_orders(database_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    start_server(hook(url), **FAST)
    eventually(lambda: hook_ready(database_url), 30)
    write(database_url, *[f"i{n}" for n in range(10)])
    time.sleep(8)  # every attempt meanwhile is refused
    receiver = Receiver(port=port)
    try:
        assert eventually(lambda: len(in_order(receiver)) == 10, 60), in_order(receiver)
        assert in_order(receiver) == [f"i{n}" for n in range(10)]
        assert len(receiver.calls) == 10  # none twice
    finally:
        receiver.stop()


def test_every_minute_on_two_instances_over_three_minutes_runs_three_times(
    start_server, database_url, lay_migrated
):
    lay_migrated({})
    make_orders(database_url)
    tables = '[schedules.tick]\ncron = "* * * * *"\nsql = "INSERT INTO ticks (n) VALUES (1)"\n'
    if time.time() % 60 > 40:  # the instances start (and first see the schedule) after a minute's start
        time.sleep(62 - time.time() % 60)
    first = start_server(tables, **FAST)
    second = start_server(tables, **FAST)
    started = time.time()
    end = (int(started) // 60 + 3) * 60 + 5  # five seconds past the third minute's start
    time.sleep(end - time.time())
    for server in (first, second):
        server.process.send_signal(signal.SIGTERM)
    for server in (first, second):
        server.process.wait(30)
    engine = sa.create_engine(database_url)
    with engine.connect() as connection:
        ticks = connection.exec_driver_sql("SELECT count(*) FROM ticks").scalar()
        runs = connection.exec_driver_sql(
            "SELECT due_at, status, instance FROM minibase_schedule_runs ORDER BY due_at"
        ).all()
    engine.dispose()
    due = [datetime.fromtimestamp(run.due_at, UTC).strftime("%H:%M:%S") for run in runs]
    assert ticks == 3, (due, json.dumps([tuple(run) for run in runs]))
    assert [run.due_at % 60 for run in runs] == [0, 0, 0] and {run.status for run in runs} == {"succeeded"}
    assert [run.due_at - runs[0].due_at for run in runs] == [0, 60, 120]
