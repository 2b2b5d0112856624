"""The official clients against a real server: supabase-js (node) with both serializers, and
supabase-py's realtime client."""

import asyncio
import json
import os
import subprocess

import pytest
from realtime import AsyncRealtimeClient, RealtimeSubscribeStates

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

    heard, state = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert heard == [{"from": "py"}]
    assert set(state) == {"ann"} and state["ann"][0]["online"] is True
