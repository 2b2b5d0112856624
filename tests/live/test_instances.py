"""Several instances on one database and one Redis (REALTIME_REDIS_URL): broadcasts, presence and
changes reach the sockets of every instance, each exactly once; and WORKERS processes on one port
share them the same way."""

import os
import shutil

import pytest
import requests
import sqlalchemy as sa
from phoenix import Client

from support import require
from tools.galera import Redis

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

TABLES = """
[tables.messages]
select = "anon"
realtime = true
"""


@pytest.fixture(scope="module")
def redis():
    found = shutil.which("redis-server") or os.path.exists("/usr/bin/redis-server")
    require(found, "redis-server", "redis-server")
    server = Redis()
    yield server
    server.stop()


@pytest.fixture
def messages(database_url):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)"))
    yield engine
    engine.dispose()


def test_two_instances_share_broadcast_presence_and_changes_once_each(start_server, redis, messages):
    one = start_server(TABLES, REALTIME_REDIS_URL=redis.url)
    two = start_server(TABLES, RATE_LIMIT_STORAGE_URI=redis.url)  # the rate limits' Redis by default
    wanted = [{"event": "*", "schema": "public", "table": "messages"}]
    ann, bob = Client(one), Client(two, "2.0.0")
    assert ann.join("room", presence={"key": "ann"}, postgres_changes=wanted)["status"] == "ok"
    assert bob.join("room", presence={"key": "bob"}, postgres_changes=wanted)["status"] == "ok"
    for client in (ann, bob):
        client.until("presence_state")
        client.until("system")

    ann.send(
        "realtime:room", "broadcast", {"type": "broadcast", "event": "hi", "payload": {"from": "one"}}, "1"
    )
    assert bob.until("broadcast")["payload"]["payload"] == {"from": "one"}
    bob.send(
        "realtime:room", "broadcast", {"type": "broadcast", "event": "hi", "payload": {"from": "two"}}, "1"
    )
    assert ann.until("broadcast")["payload"]["payload"] == {"from": "two"}

    ann.send("realtime:room", "presence", {"type": "presence", "event": "track", "payload": {"on": 1}}, "1")
    assert list(bob.until("presence_diff")["payload"]["joins"]) == ["ann"]
    carl = Client(two)
    carl.join("room", presence={"key": "carl"})
    assert set(carl.until("presence_state")["payload"]) == {"ann"}  # tracked on the other instance

    with messages.begin() as connection:
        connection.execute(sa.text("INSERT INTO messages (body) VALUES ('once')"))
    for client in (ann, bob):
        message = client.until("postgres_changes")
        assert message["payload"]["data"]["record"]["body"] == "once"
    ann.close()
    assert list(bob.until("presence_diff")["payload"]["leaves"]) == ["ann"]
    for client in (bob, carl):  # nothing came twice
        while True:
            try:
                frame = client.recv(timeout=0.5)
            except TimeoutError:
                break
            assert frame["event"] not in ("broadcast", "postgres_changes"), frame


def test_workers_share_broadcasts_through_redis(start_server, redis, messages):
    server = start_server(TABLES, WORKERS=2, REALTIME_REDIS_URL=redis.url)
    clients = [Client(server) for _ in range(8)]  # spread over both workers by the kernel
    for client in clients:
        assert client.join("room")["status"] == "ok"
    clients[0].send("realtime:room", "broadcast", {"type": "broadcast", "event": "e", "payload": {}}, "1")
    for client in clients[1:]:
        assert client.until("broadcast")["payload"]["event"] == "e"
        client.nothing()


PRIVATE = """
[realtime]
select = "authenticated"
insert = "authenticated"
"""


def test_a_logout_on_one_instance_ends_the_private_channel_on_the_other(start_server, redis):
    """The logout is made through instance one; ann's socket is on instance two, which sees it in the
    database within REALTIME_RECHECK_SECONDS: nothing from bob reaches her through Redis any more, and
    nothing of hers reaches bob."""
    one = start_server(PRIVATE, REALTIME_REDIS_URL=redis.url, REALTIME_RECHECK_SECONDS="0.2")
    two = start_server(PRIVATE, REALTIME_REDIS_URL=redis.url, REALTIME_RECHECK_SECONDS="0.2")
    tokens = {}
    for name in ("ann", "bob"):
        body = {"email": f"{name}@example.com", "password": "secret-pw"}
        answer = requests.post(
            f"{one.base}/auth/v1/signup", json=body, headers={"apikey": one.anon}, timeout=10
        )
        tokens[name] = answer.json()["access_token"]
    ann, bob = Client(two), Client(one, "2.0.0")
    for client, name in ((ann, "ann"), (bob, "bob")):
        reply = client.join("room", private=True, access_token=tokens[name], presence={"key": name})
        assert reply["status"] == "ok"
        client.until("presence_state")
    bob.send("realtime:room", "broadcast", {"type": "broadcast", "event": "hi", "payload": {}}, "1")
    assert ann.until("broadcast")["payload"]["event"] == "hi"

    headers = {"apikey": one.anon, "Authorization": f"Bearer {tokens['ann']}"}
    assert requests.post(f"{one.base}/auth/v1/logout", headers=headers, timeout=10).status_code == 204
    assert ann.until("system", timeout=15)["payload"]["status"] == "error"
    ann.until("phx_close")
    bob.send("realtime:room", "broadcast", {"type": "broadcast", "event": "after", "payload": {}}, "1")
    ann.send("realtime:room", "broadcast", {"type": "broadcast", "event": "ghost", "payload": {}}, "1")
    ann.send("realtime:room", "presence", {"type": "presence", "event": "track", "payload": {}}, "1")
    for _ in range(2):
        assert ann.until("phx_reply")["payload"]["status"] == "error"
    ann.nothing(0.5)
    bob.nothing(0.5)
