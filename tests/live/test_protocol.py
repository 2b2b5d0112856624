"""The socket as Phoenix channels speak it, frame by frame, with both serializers: the API key at
the upgrade, joins and their refusals, heartbeats, broadcast (self, ack, binary frames), presence,
limits, malformed frames, and the 1001 of a stop."""

import json
import signal
import struct
import time

import jwt
import pytest
import requests
from phoenix import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from auth import signing_keys, tokens
from support import SECRET, eventually

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_heartbeat_join_and_broadcast_to_the_others(server, vsn):
    ann, bob = Client(server, vsn), Client(server, vsn)
    ref = ann.send("phoenix", "heartbeat", {})
    assert ann.recv() == {"join_ref": None, "ref": ref, "topic": "phoenix", "event": "phx_reply",
                          "payload": {"status": "ok", "response": {}}}  # fmt: skip
    assert ann.join("room") == {"status": "ok", "response": {"postgres_changes": []}}
    assert bob.join("room", broadcast={"ack": True})["status"] == "ok"
    ann.send("realtime:room", "broadcast", {"type": "broadcast", "event": "hi", "payload": {"n": 1}}, "2")
    heard = bob.until("broadcast")
    assert heard["payload"] == {"type": "broadcast", "event": "hi", "payload": {"n": 1}}
    ann.nothing()  # not to the sender without self, and no reply without ack
    ref = bob.send("realtime:room", "broadcast", {"type": "broadcast", "event": "hi", "payload": {}}, "2")
    acked = bob.until("phx_reply")
    assert acked["ref"] == ref and acked["payload"]["status"] == "ok"
    assert ann.until("broadcast")["payload"]["event"] == "hi"


def test_self_broadcast_reaches_the_sender_too(server):
    ann = Client(server)
    ann.join("room", broadcast={"self": True})
    ann.send("realtime:room", "broadcast", {"type": "broadcast", "event": "me", "payload": {"a": 1}}, "1")
    assert ann.until("broadcast")["payload"]["payload"] == {"a": 1}


def user_broadcast_push(join_ref, ref, topic, event, data, encoding=1):
    parts = [join_ref.encode(), ref.encode(), topic.encode(), event.encode(), b""]
    return struct.pack("7B", 3, *(len(p) for p in parts), encoding) + b"".join(parts) + data


def test_binary_broadcast_frames_and_both_serializers_on_one_topic(server):
    sender, binary, text = Client(server, "2.0.0"), Client(server, "2.0.0"), Client(server, "1.0.0")
    for client in (sender, binary, text):
        client.join("mixed")
    sender.ws.send(user_broadcast_push("1", "9", "realtime:mixed", "moved", b'{"x":3}'))
    frame = binary.recv()
    assert isinstance(frame, bytes) and frame[0] == 4  # a user broadcast, as realtime-js decodes it
    topic_size, event_size, meta_size, encoding = frame[1:5]
    assert frame[5 : 5 + topic_size] == b"realtime:mixed" and encoding == 1 and meta_size == 0
    assert frame[5 + topic_size : 5 + topic_size + event_size] == b"moved"
    assert json.loads(frame[5 + topic_size + event_size :]) == {"x": 3}
    assert text.until("broadcast")["payload"] == {"type": "broadcast", "event": "moved", "payload": {"x": 3}}
    # A binary payload cannot be said in vsn 1.0.0's JSON: that socket is spared it.
    sender.ws.send(user_broadcast_push("1", "10", "realtime:mixed", "raw", b"\x00\xff", encoding=0))
    assert binary.recv()[-2:] == b"\x00\xff"
    text.nothing()


def test_presence_state_diffs_and_a_leave_when_the_socket_goes(server):
    ann, bob = Client(server), Client(server, "2.0.0")
    ann.join("lobby", presence={"key": "ann"})
    assert ann.until("presence_state")["payload"] == {}
    ann.send(
        "realtime:lobby", "presence", {"type": "presence", "event": "track", "payload": {"mood": "ok"}}, "1"
    )
    joined = ann.until("presence_diff")["payload"]
    ref = joined["joins"]["ann"]["metas"][0]["phx_ref"]
    assert joined == {"joins": {"ann": {"metas": [{"phx_ref": ref, "mood": "ok"}]}}, "leaves": {}}
    bob.join("lobby", presence={"key": "bob"})
    assert bob.until("presence_state")["payload"] == {"ann": {"metas": [{"phx_ref": ref, "mood": "ok"}]}}
    ann.send(
        "realtime:lobby", "presence", {"type": "presence", "event": "track", "payload": {"mood": "hi"}}, "1"
    )
    changed = bob.until("presence_diff")["payload"]
    assert changed["leaves"] == {"ann": {"metas": [{"phx_ref": ref, "mood": "ok"}]}}
    assert changed["joins"]["ann"]["metas"][0]["mood"] == "hi"
    assert changed["joins"]["ann"]["metas"][0]["phx_ref_prev"] == ref
    ann.close()
    left = bob.until("presence_diff")["payload"]
    assert list(left["leaves"]) == ["ann"] and left["joins"] == {}


def test_the_api_key_is_required_at_the_upgrade(server):
    foreign = tokens.api_key("anon", "another-secret-" + "y" * 40)
    keys = (
        ("", "No API key found in request"),
        ("not-a-key", "Invalid API key"),
        (foreign, "Invalid API key"),
    )
    for key, message in keys:
        with pytest.raises(InvalidStatus) as refused:
            connect(server.socket_url(key), open_timeout=5)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["message"] == message
    with pytest.raises(InvalidStatus) as refused:
        connect(server.socket_url(vsn="9.9.9"), open_timeout=5)
    assert refused.value.response.status_code == 400
    Client(server, key=server.service).join("room")  # the service key is a key too
    time.sleep(0.3)  # the log is written in batches
    assert server.service not in server.log()  # uvicorn logged each socket's ?apikey=


def test_refused_joins_are_answered_with_supabases_reasons(start_server):
    server = start_server(REALTIME_MAX_CHANNELS=2)
    client = Client(server)
    assert client.join("")["response"] == {"reason": "TopicNameRequired: You must provide a topic name"}
    expired = tokens.access_token({"sub": "1", "session_id": "x"}, SECRET, -10)[0]
    reason = client.join("a", access_token=expired)["response"]["reason"]
    assert reason.startswith("InvalidJWTToken: ")
    forged = tokens.access_token({"sub": "1", "session_id": "x"}, "another-secret-" + "y" * 40, 600)[0]
    assert client.join("a", access_token=forged)["response"]["reason"].startswith("InvalidJWTToken: ")
    assert client.join("a")["status"] == "ok" and client.join("b")["status"] == "ok"
    assert client.join("c")["response"] == {"reason": "ChannelRateLimitReached: Too many channels"}
    assert client.join("a")["status"] == "ok"  # joining a joined topic again replaces it
    ref = client.send("realtime:nowhere", "broadcast", {"type": "broadcast", "event": "x", "payload": {}})
    reply = client.until("phx_reply")
    assert reply["ref"] == ref and reply["payload"] == {
        "status": "error",
        "response": {"reason": "unmatched topic"},
    }


def test_a_leave_ends_what_the_channel_receives(server):
    ann, bob = Client(server), Client(server)
    ann.join("room")
    bob.join("room")
    ref = ann.send("realtime:room", "phx_leave", {}, "1")
    assert ann.until("phx_reply")["ref"] == ref
    bob.send("realtime:room", "broadcast", {"type": "broadcast", "event": "x", "payload": {}}, "1")
    ann.until("phx_close")
    ann.nothing()


def test_too_many_events_a_second_end_that_channel_only(start_server):
    server = start_server(REALTIME_MAX_EVENTS=5)
    ann, bob = Client(server), Client(server)
    ann.join("room")
    bob.join("room")
    for n in range(8):
        ann.send("realtime:room", "broadcast", {"type": "broadcast", "event": "x", "payload": {"n": n}}, "1")
    system = ann.until("system")["payload"]
    assert system == {"extension": "system", "status": "error", "message": "Too many messages per second",
                      "channel": "room"}  # fmt: skip
    heard = [bob.until("broadcast")["payload"]["payload"]["n"] for _ in range(5)]
    assert heard == [0, 1, 2, 3, 4]
    bob.nothing()


@pytest.mark.parametrize(
    "frame", ["not json", "[1, 2]", '{"topic": 1}', b"\x07\x00", '["1","2","t","e","payload"]']
)
def test_a_malformed_frame_closes_that_socket_only(server, frame):
    bad, good, other = Client(server, "2.0.0"), Client(server, "2.0.0"), Client(server, "2.0.0")
    good.join("room")
    other.join("room")
    bad.ws.send(frame)
    with pytest.raises(ConnectionClosed) as closed:
        bad.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    good.send("realtime:room", "broadcast", {"type": "broadcast", "event": "x", "payload": {}}, "1")
    assert other.until("broadcast")["payload"]["event"] == "x"


def test_a_socket_that_stops_reading_is_closed_and_the_rest_goes_on(start_server):
    server = start_server(REALTIME_MAX_QUEUE=20, REALTIME_MAX_EVENTS=10000)
    sender, stalled, reader = Client(server), Client(server), Client(server)
    for client in (sender, stalled, reader):
        client.join("feed")
    big = "x" * 200_000
    for n in range(300):  # far more than the socket buffers and the queue of 20 hold
        sender.send(
            "realtime:feed",
            "broadcast",
            {"type": "broadcast", "event": "e", "payload": {"n": n, "b": big}},
            "1",
        )
        if n % 20 == 19:
            while True:  # the reader keeps up
                try:
                    reader.ws.recv(timeout=0.01)
                except TimeoutError:
                    break
    assert "did not read" in server.wait_for_log("did not read")
    assert requests.get(f"{server.base}/health", timeout=5).json() == {"status": "ok"}
    with pytest.raises(ConnectionClosed):
        while True:
            stalled.ws.recv(timeout=5)
    sender.send("realtime:feed", "broadcast", {"type": "broadcast", "event": "last", "payload": {}}, "1")
    eventually(lambda: reader.until("broadcast")["payload"]["event"] == "last", 10, 0)


def test_a_plain_request_to_the_socket_path_is_a_json_400(server):
    response = requests.get(
        f"{server.base}/realtime/v1/websocket", headers={"apikey": server.anon}, timeout=5
    )
    assert response.status_code == 400 and response.json()["message"] == "Expected a WebSocket upgrade"


def test_sigterm_closes_every_socket_with_1001_and_exits_0(server):
    ann, bob = Client(server), Client(server, "2.0.0")
    ann.join("room")
    server.process.send_signal(signal.SIGTERM)
    for client in (ann, bob):
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                client.recv()
        assert closed.value.rcvd.code == 1001
    assert server.process.wait(timeout=15) == 0


def test_a_frame_past_the_message_size_closes_that_socket_with_1009(start_server):
    server = start_server(REALTIME_MAX_MESSAGE="1KB")
    big, other = Client(server), Client(server)
    big.join("room")
    other.join("room")
    big.send(
        "realtime:room", "broadcast", {"type": "broadcast", "event": "x", "payload": {"b": "x" * 2000}}, "1"
    )
    with pytest.raises(ConnectionClosed) as closed:
        big.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    other.nothing()
    assert other.join("room2")["status"] == "ok"


def test_an_es256_token_joins_through_a_publishable_key(start_server):
    """Signing keys and sb_ keys reach Realtime through the one verification the APIs use."""
    key, stranger = (
        signing_keys.generate("ES256", kid="live-key"),
        signing_keys.generate("ES256", kid="live-key"),
    )
    publishable = "sb_publishable_" + "L" * 31
    server = start_server(
        JWT_SIGNING_KEYS=json.dumps([key]), PUBLISHABLE_KEYS=json.dumps({"web": publishable})
    )
    signed_up = requests.post(
        f"{server.base}/auth/v1/signup",
        headers={"apikey": publishable},
        json={"email": "live@example.com", "password": "secret-pw"},
        timeout=10,
    ).json()
    token = signed_up["access_token"]
    assert jwt.get_unverified_header(token)["kid"] == "live-key"
    client = Client(server, key=publishable)
    assert client.join("room", access_token=token)["status"] == "ok"
    claims = jwt.decode(token, options={"verify_signature": False})
    forged = jwt.encode(
        claims,
        signing_keys.load([stranger], SECRET).signing.private_key,
        "ES256",
        headers={"kid": "live-key"},
    )
    assert client.join("other", access_token=forged)["response"]["reason"].startswith("InvalidJWTToken: ")
