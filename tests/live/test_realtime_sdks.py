"""The official clients against a real server: supabase-js (node) with both serializers, and
supabase-py's realtime client."""

import asyncio
import json
import os
import subprocess

import pytest
import sqlalchemy as sa
from realtime import AsyncRealtimeClient, RealtimeSubscribeStates

from support import run_async

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_supabase_js_broadcast_and_presence(node_modules, server, vsn):
    env = {**os.environ, "MINIBASE_URL": server.base, "ANON_KEY": server.anon, "VSN": vsn}
    done = subprocess.run(
        ["node", "realtime.mjs"],
        cwd=node_modules.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["annJoin"] == ["SUBSCRIBED", None] and out["bobJoin"] == ["SUBSCRIBED", None]
    assert out["ack"] == "ok"
    assert out["annSeen"] == [{"n": 1, "text": "héllo"}, {"n": 2}]  # self: true, and bob's
    assert out["bobSeen"] == [{"n": 1, "text": "héllo"}]  # not its own: self is false by default
    assert out["track"] == "ok" and out["untrack"] == "ok"
    assert out["stateAfterTrack"] == ["ann", "bob"] and out["annMeta"] == "online"
    assert out["stateAfterUntrack"] == ["bob"] and out["annSees"] == ["ann", "bob"]
    assert out["leftOnDisconnect"] == ["bob"]
    reason = "Unauthorized: You do not have permissions to read from this Channel topic: secret-room"
    assert out["privateJoin"] == ["CHANNEL_ERROR", reason]


def test_supabase_py_broadcast_and_presence(server):
    async def scenario():
        url = f"{server.base}/realtime/v1"
        ann, bob = AsyncRealtimeClient(url, server.anon), AsyncRealtimeClient(url, server.anon)
        await ann.connect()
        await bob.connect()
        heard, statuses, joined = [], [], asyncio.Event()
        room = bob.channel("room", {"config": {"presence": {"key": "bob"}}})
        room.on_broadcast("msg", lambda message: heard.append(message["payload"]))
        room.on_presence_join(lambda key, current, new: key == "ann" and joined.set())
        await room.subscribe(lambda status, error: statuses.append(status))
        annroom = ann.channel("room", {"config": {"broadcast": {"ack": True}, "presence": {"key": "ann"}}})
        await annroom.subscribe()
        while RealtimeSubscribeStates.SUBSCRIBED not in statuses or not annroom.is_joined:
            await asyncio.sleep(0.02)
        await annroom.send_broadcast("msg", {"from": "py"})
        await annroom.track({"online": True})
        await asyncio.wait_for(joined.wait(), 5)
        while not heard:
            await asyncio.sleep(0.02)
        state = room.presence_state()
        await ann.close()
        await bob.close()
        return heard, state

    heard, state = run_async(asyncio.wait_for(scenario(), 30))
    assert heard == [{"from": "py"}]
    assert set(state) == {"ann"} and state["ann"][0]["online"] is True


CHANGES = """
[tables.messages]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"
realtime = true

[tables.plain]
select = "anon"

[tables.notes]
select = "owner"
insert = "owner"
owner_column = "user_id"
realtime = true
"""


@pytest.fixture
def changes_server(start_server, database_url):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text("CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, room INTEGER, body TEXT)")
        )
        connection.execute(sa.text("CREATE TABLE plain (id INTEGER PRIMARY KEY, body TEXT)"))
        connection.execute(sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER, body TEXT)"))
    engine.dispose()
    return start_server(CHANGES)


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_supabase_js_postgres_changes(node_modules, changes_server, vsn):
    server = changes_server
    env = {
        **os.environ,
        "MINIBASE_URL": server.base,
        "ANON_KEY": server.anon,
        "SERVICE_KEY": server.service,
        "VSN": vsn,
    }
    done = subprocess.run(
        ["node", "realtime_changes.mjs"],
        cwd=node_modules.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == ["SUBSCRIBED", None]
    common = {"table": "messages", "schema": "public", "errors": None, "stamped": True}
    assert out["all"] == [
        {**common, "eventType": "INSERT", "new": {"id": 1, "room": 1, "body": "one"}, "old": {}},
        {**common, "eventType": "INSERT", "new": {"id": 2, "room": 2, "body": "two"}, "old": {}},
        {
            **common,
            "eventType": "UPDATE",
            "new": {"id": 1, "room": 1, "body": "one, edited"},
            "old": {"id": 1},
        },
        {**common, "eventType": "DELETE", "new": {}, "old": {"id": 2}},
    ]
    assert out["room2"] == ["two"]
    assert out["refused"][0] == "CHANNEL_ERROR" and "Unable to subscribe" in out["refused"][1]
    assert out["otherInsert"] == 201  # another owner's note, written first: never told to ann
    assert out["notesStatus"] == ["SUBSCRIBED", None] and out["notes"] == ["hers"]


def test_supabase_py_postgres_changes(changes_server):
    server = changes_server

    async def scenario():
        client = AsyncRealtimeClient(f"{server.base}/realtime/v1", server.anon)
        await client.connect()
        seen, statuses = [], []
        channel = client.channel("db")
        channel.on_postgres_changes("*", table="messages", schema="public", callback=seen.append)
        await channel.subscribe(lambda status, error: statuses.append(status))
        while RealtimeSubscribeStates.SUBSCRIBED not in statuses:
            await asyncio.sleep(0.02)
        engine = sa.create_engine(changes_server_url)
        with engine.begin() as connection:
            connection.execute(sa.text("INSERT INTO messages (room, body) VALUES (7, 'from python')"))
        engine.dispose()
        while not seen:
            await asyncio.sleep(0.02)
        await client.close()
        return seen

    changes_server_url = server.database_url
    [payload] = run_async(asyncio.wait_for(scenario(), 30))
    data = payload["data"]
    assert data["type"] == "INSERT" and data["record"] == {"id": 1, "room": 7, "body": "from python"}


JOURNAL = """
[tables.journal]
select = "owner"
insert = "owner"
update = "owner"
delete = "owner"
owner_column = "user_id"
realtime = true
"""


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_a_page_subscribed_before_sign_in_gets_the_users_changes(
    node_modules, start_server, database_url, vsn
):
    """supabase-js subscribes with no session, signs in, and the user's inserts, updates and deletes
    arrive with no rejoin; a reload of the signed-in page gets the next change; realtime-js 2.9
    alone (the slack clone's), subscribed with the anon key, gets them after setAuth."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text("CREATE TABLE journal (id INTEGER PRIMARY KEY, user_id INTEGER, body TEXT)")
        )
    engine.dispose()
    server = start_server(JOURNAL)
    env = {**os.environ, "MINIBASE_URL": server.base, "ANON_KEY": server.anon, "SERVICE_KEY": server.service,
           "VSN": vsn}  # fmt: skip
    done = subprocess.run(["node", "realtime_sign_in.mjs"], cwd=node_modules.parent, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["firstStatus"] == ["SUBSCRIBED", None] and out["whileAnonymous"] == 0
    assert out["first"] == [
        ["INSERT", "signed in"],
        ["UPDATE", "edited"],
        ["DELETE", 2],
    ]
    assert out["reloadedStatus"] == ["SUBSCRIBED", None] and out["reloaded"] == [["INSERT", "after reload"]]
    assert out["oldStatus"] == ["SUBSCRIBED", None] and out["oldWhileAnonymous"] == 0
    assert out["old"] == [
        ["INSERT", "old client"],
        ["UPDATE", "old client, edited"],
        ["DELETE", out["oldId"]],
    ]


PRIVATE = """
[realtime]
select = "authenticated"
insert = "authenticated"
"""


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_supabase_js_private_channel_closes_when_its_user_signs_out(node_modules, start_server, vsn):
    server = start_server(PRIVATE)
    env = {**os.environ, "MINIBASE_URL": server.base, "ANON_KEY": server.anon, "VSN": vsn}
    done = subprocess.run(["node", "realtime_private_sign_out.mjs"], cwd=node_modules.parent, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "SUBSCRIBED" in out["annStatuses"] and out["annStatuses"][-1] == "CLOSED"
    assert out["bobStatuses"] == ["SUBSCRIBED"]
    refused = "You do not have permissions to read from this Channel topic: room-1"
    assert ["error", refused] in out["annSystem"]
    assert out["annHeard"] == ["before-bob"]  # not bob's after her sign-out
    assert out["bobHeard"] == ["before-ann"]  # not what she sent after it
    assert out["annSendAfter"] != "ok" and out["bobSendAfter"] == "ok"
