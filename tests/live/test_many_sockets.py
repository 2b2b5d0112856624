"""A thousand real WebSocket connections to a real `python wsgi.py`: /health still answers at once,
and a broadcast still reaches every one of them."""

import asyncio
import json
import resource
import time

import pytest
import requests
import websockets

from support import run_async

SOCKETS = 1000
pytestmark = [pytest.mark.alone, pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]


def test_health_and_a_broadcast_with_a_thousand_sockets_open(server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SOCKETS + 200:
        pytest.skip(f"this process may open {hard} files, fewer than {SOCKETS} sockets need")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, SOCKETS + 1000)), hard))

    async def scenario():
        url = server.socket_url(vsn="2.0.0")
        join = {"config": {"broadcast": {}, "presence": {"enabled": False}, "postgres_changes": []}}

        async def one(n):
            socket = await websockets.connect(url, open_timeout=30, ping_interval=None, max_size=None)
            await socket.send(json.dumps([str(n), str(n), "realtime:crowd", "phx_join", join]))
            reply = json.loads(await asyncio.wait_for(socket.recv(), 30))
            assert reply[3] == "phx_reply" and reply[4]["status"] == "ok", reply
            return socket

        sockets = []
        try:
            for start in range(0, SOCKETS, 100):  # in waves: a burst of a thousand overflows the backlog
                sockets += await asyncio.gather(*(one(n) for n in range(start, start + 100)))
            started = time.monotonic()
            health = await asyncio.to_thread(requests.get, f"{server.base}/health", timeout=5)
            answered_in = time.monotonic() - started
            sent = await asyncio.to_thread(
                requests.post,
                f"{server.base}/realtime/v1/api/broadcast",
                json={"messages": [{"topic": "crowd", "event": "news", "payload": {"n": 1}}]},
                headers={"apikey": server.anon},
                timeout=10,
            )

            async def heard(socket):
                frame = json.loads(await asyncio.wait_for(socket.recv(), 20))
                return frame[3:] == ["broadcast", {"type": "broadcast", "event": "news", "payload": {"n": 1}}]

            heard_by = await asyncio.gather(*(heard(socket) for socket in sockets))
            return health, answered_in, sent, heard_by
        finally:
            await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)

    health, answered_in, sent, heard_by = run_async(asyncio.wait_for(scenario(), 120))
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert answered_in < 2, f"/health took {answered_in:.2f} s with {SOCKETS} sockets open"
    assert sent.status_code == 202
    assert len(heard_by) == SOCKETS and all(heard_by)
