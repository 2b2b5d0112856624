"""Private channels under tables.toml's [realtime] rules and policies, kept apart from public topics
of the same name; and POST /realtime/v1/api/broadcast, with the same rules."""

import subprocess
import sys
from pathlib import Path

import pytest
import requests
from phoenix import Client

from auth import tokens
from support import SECRET, free_port

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

RULES = """
[realtime]
select = "authenticated"
insert = "authenticated"

[realtime.policies]
select = "topic LIKE 'room-%'"
insert = "topic LIKE 'room-%' AND extension = 'broadcast'"
"""


def user_token(server, email):
    body = {"email": email, "password": "secret-pw"}
    answer = requests.post(
        f"{server.base}/auth/v1/signup", json=body, headers={"apikey": server.anon}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def post(server, messages, token=None, key=None):
    headers = {"apikey": key or server.anon}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(f"{server.base}/realtime/v1/api/broadcast", json={"messages": messages},
                         headers=headers, timeout=10)  # fmt: skip


def test_private_channels_follow_the_realtime_rules_and_policies(start_server):
    server = start_server(RULES)
    ann = user_token(server, "ann@example.com")
    refused = "Unauthorized: You do not have permissions to read from this Channel topic: "
    anon = Client(server)
    assert anon.join("room-1", private=True)["response"] == {"reason": refused + "room-1"}
    member, public = Client(server), Client(server)
    assert member.join("other", private=True, access_token=ann)["response"] == {"reason": refused + "other"}
    assert member.join("room-1", private=True, access_token=ann, broadcast={"ack": True})["status"] == "ok"
    assert public.join("room-1")["status"] == "ok"  # the public topic of that name is another topic
    assert Client(server, key=server.service).join("anything", private=True)["status"] == "ok"

    member.send("realtime:room-1", "broadcast", {"type": "broadcast", "event": "secret", "payload": {}}, "1")
    member.until("phx_reply")
    public.nothing()
    public.send("realtime:room-1", "broadcast", {"type": "broadcast", "event": "open", "payload": {}}, "1")
    member.nothing()
    ref = member.send(
        "realtime:room-1", "presence", {"type": "presence", "event": "track", "payload": {}}, "1"
    )
    reply = member.until("phx_reply")  # presence is not in the insert policy
    assert reply["ref"] == ref and reply["payload"]["status"] == "error"

    # The HTTP API: the same rules, and nothing of a refused request is sent.
    assert (
        post(server, [{"topic": "room-1", "event": "x", "payload": {}, "private": True}]).status_code == 401
    )
    mixed = [
        {"topic": "room-1", "event": "a", "payload": {}},
        {"topic": "other", "event": "b", "private": True},
    ]
    assert post(server, mixed, token=ann).status_code == 403
    public.nothing()
    sent = post(
        server, [{"topic": "room-1", "event": "api", "payload": {"n": 1}, "private": True}], token=ann
    )
    assert sent.status_code == 202 and sent.text == ""
    assert member.until("broadcast")["payload"] == {"type": "broadcast", "event": "api", "payload": {"n": 1}}
    public.nothing()
    assert post(server, [{"topic": "room-1", "event": "all", "payload": {}}]).status_code == 202
    assert public.until("broadcast")["payload"]["event"] == "all"
    member.nothing()
    assert (
        post(server, [{"topic": "anything", "event": "s", "private": True}], key=server.service).status_code
        == 202
    )


@pytest.mark.parametrize(
    "body",
    [None, {}, {"messages": []}, {"messages": [1]}, {"messages": [{"topic": "", "event": "x"}]},
     {"messages": [{"topic": "t", "event": "x", "payload": []}]}, {"messages": [{"topic": "t"}]}],
)  # fmt: skip
def test_a_bad_broadcast_body_is_a_json_400(server, body):
    url = f"{server.base}/realtime/v1/api/broadcast"
    answer = requests.post(url, json=body, headers={"apikey": server.anon}, timeout=10)
    assert answer.status_code == 400 and set(answer.json()) == {"message", "code", "hint", "details"}


def test_a_broadcast_needs_a_valid_key_and_token(server):
    assert post(server, [{"topic": "t", "event": "x"}], key="nope").status_code == 401
    forged = tokens.access_token({"sub": "1", "session_id": "x"}, "another-secret-" + "y" * 40, 600)[0]
    assert post(server, [{"topic": "t", "event": "x"}], token=forged).status_code == 401
    assert tokens.api_key("anon", SECRET) == server.anon


def test_a_private_channel_policy_the_database_refuses_stops_the_start(tmp_path, database_url):
    config = tmp_path / "tables.toml"
    config.write_text('[realtime]\nselect = "anon"\n[realtime.policies]\nselect = "no_such_column = 1"\n')
    env = {"DATABASE_URL": database_url, "JWT_SECRET": SECRET, "TABLES_CONFIG": str(config),
           "PORT": str(free_port()), "PATH": "/usr/bin:/bin"}  # fmt: skip
    command = [sys.executable, "wsgi.py"]
    done = subprocess.run(command, cwd=server_root(), env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0 and "[realtime.policies]: select does not compile" in done.stderr


def server_root():
    # Not `from conftest import ROOT`: which conftest that names depends on the tests collected with it.
    return Path(__file__).resolve().parent.parent.parent


def test_one_message_sent_as_realtime_js_httpsend_sends_it(start_server):
    server = start_server(RULES)
    ann = user_token(server, "ann@example.com")
    objects, arrays = Client(server), Client(server, "2.0.0")
    assert objects.join("lobby")["status"] == "ok" and arrays.join("lobby")["status"] == "ok"
    member = Client(server, "2.0.0")
    assert member.join("room-1", private=True, access_token=ann)["status"] == "ok"
    url = f"{server.base}/realtime/v1/api/broadcast"

    def send(path, body, content_type="application/json", token=None):
        headers = {"apikey": server.anon, "Content-Type": content_type}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.post(url + path, data=body, headers=headers, timeout=10)

    sent = send("/lobby/events/hello", '{"a": 1}')
    assert sent.status_code == 202 and sent.text == ""
    assert objects.until("broadcast")["payload"] == {
        "type": "broadcast",
        "event": "hello",
        "payload": {"a": 1},
    }
    # Serializer 2.0.0 gets it as Supabase sends it: a binary user broadcast, its payload JSON.
    assert (
        arrays.recv()
        == bytes([4, len("realtime:lobby"), 5, 0, 1]) + b"realtime:lobby" + b"hello" + b'{"a": 1}'
    )
    member.nothing()

    raw = bytes([0, 1, 2, 255])
    assert send("/room-1/events/bytes?private=true", raw, "application/octet-stream").status_code == 401
    assert send("/other/events/bytes?private=true", raw, "application/octet-stream", ann).status_code == 403
    assert send("/lobby/events/bad", "{not json").status_code == 400
    forged = tokens.access_token({"sub": "1", "session_id": "x"}, "another-secret-" + "y" * 40, 600)[0]
    assert send("/lobby/events/x", "{}", token=forged).status_code == 401
    assert (
        requests.post(url + "/lobby/events/x", json={}, headers={"apikey": "nope"}, timeout=10).status_code
        == 401
    )
    assert send("/" + "t" * 201 + "/events/x", "{}").status_code == 400
    refused = send("/lobby/events/text", "hi", "text/plain")
    assert refused.status_code == 415 and set(refused.json()) == {"message", "code", "hint", "details"}
    objects.nothing()
    arrays.nothing()
    member.nothing()
    sent = send("/room-1/events/bytes?private=true", raw, "application/octet-stream", ann)
    assert sent.status_code == 202
    assert member.recv() == bytes([4, len("realtime:room-1"), 5, 0, 0]) + b"realtime:room-1" + b"bytes" + raw
    objects.nothing()  # nor the public topic of that name, nor anything to a 1.0.0 socket
