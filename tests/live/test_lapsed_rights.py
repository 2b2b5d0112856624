"""A private channel stops with its rights: after a logout (global, or of that session), a ban, or the
token's expiry, its socket hears nothing more on the topic and what it sends reaches nobody
(broadcast, presence, httpSend), it gets Supabase's system message and phx_close, while another
user on the topic keeps working throughout. A new token is judged against the topic's policies again."""

import time

import jwt
import pytest
import requests
from phoenix import Client

from auth import tokens
from support import SECRET

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

RULES = """
[realtime]
select = "authenticated"
insert = "authenticated"

[realtime.policies]
select = "topic LIKE 'room-%' AND :email <> 'outsider@example.com'"
insert = "topic LIKE 'room-%' AND :email <> 'quiet@example.com'"
"""
RECHECK = "0.2"  # REALTIME_RECHECK_SECONDS: a logout or a ban is seen within it


def sign_up(server, email):
    body = {"email": email, "password": "secret-pw"}
    answer = requests.post(
        f"{server.base}/auth/v1/signup", json=body, headers={"apikey": server.anon}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"], answer.json()["user"]["id"]


def sign_in(server, email):
    answer = requests.post(f"{server.base}/auth/v1/token?grant_type=password",
                           json={"email": email, "password": "secret-pw"},
                           headers={"apikey": server.anon}, timeout=10)  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def brief_token(token, seconds):
    """The same session's token, expiring in `seconds`."""
    claims = jwt.decode(token, options={"verify_signature": False})
    kept = {key: claims[key] for key in ("sub", "session_id", "email", "aal", "amr", "role") if key in claims}
    return tokens.access_token(kept, SECRET, seconds)[0]


def member(server, token, key):
    client = Client(server, "2.0.0" if key == "bob" else "1.0.0")
    reply = client.join("room-1", private=True, access_token=token, presence={"key": key, "enabled": True})
    assert reply["status"] == "ok", reply
    client.until("presence_state")
    return client


def say(client, event):
    client.send("realtime:room-1", "broadcast", {"type": "broadcast", "event": event, "payload": {}}, "1")


def track(client, state):
    return client.send(
        "realtime:room-1", "presence", {"type": "presence", "event": "track", "payload": state}, "1"
    )


def http_send(server, token, event):
    headers = {"apikey": server.anon, "Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = f"{server.base}/realtime/v1/api/broadcast/room-1/events/{event}?private=true"
    return requests.post(url, data="{}", headers=headers, timeout=10)


def heard(client):
    """The event of the next broadcast `client` hears (a frame of either serializer), past presence."""
    while True:
        message = client.recv()
        if isinstance(message, bytes):  # 2.0.0's binary broadcast: [4, topic, event, 0, encoding] lengths
            start = 5 + message[1]
            return message[start : start + message[2]].decode()
        if message["event"] == "broadcast":
            return message["payload"]["event"]


def lapse(server, cause, ann_id, ann_token):
    if cause == "logout":
        headers = {"apikey": server.anon, "Authorization": f"Bearer {ann_token}"}
        answer = requests.post(f"{server.base}/auth/v1/logout", headers=headers, timeout=10)
        assert answer.status_code == 204
    elif cause == "logout-local":
        headers = {"apikey": server.anon, "Authorization": f"Bearer {ann_token}"}
        answer = requests.post(f"{server.base}/auth/v1/logout?scope=local", headers=headers, timeout=10)
        assert answer.status_code == 204
    elif cause == "ban":
        headers = {"apikey": server.service, "Authorization": f"Bearer {server.service}"}
        answer = requests.put(f"{server.base}/auth/v1/admin/users/{ann_id}", json={"ban_duration": "2h"},
                              headers=headers, timeout=10)  # fmt: skip
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "cause", ["logout", "logout-local", "ban", pytest.param("expiry", marks=pytest.mark.alone)]
)
def test_a_private_channel_stops_with_its_rights(start_server, cause):
    server = start_server(RULES, REALTIME_RECHECK_SECONDS=RECHECK)
    ann_token, ann_id = sign_up(server, "ann@example.com")
    bob_token, _ = sign_up(server, "bob@example.com")
    if cause == "expiry":
        ann_token = brief_token(ann_token, 5)
    ann, bob = member(server, ann_token, "ann"), member(server, bob_token, "bob")
    watcher = Client(server, key=server.service)  # a third party on the topic: the service key
    assert watcher.join("room-1", private=True)["status"] == "ok"

    # Before: ann hears and speaks, as bob does.
    say(bob, "from-bob")
    assert heard(ann) == "from-bob" and heard(watcher) == "from-bob"
    say(ann, "from-ann")
    assert heard(bob) == "from-ann" and heard(watcher) == "from-ann"
    assert http_send(server, ann_token, "http-ann").status_code == 202
    assert heard(bob) == "http-ann"
    assert heard(ann) == "http-ann"  # httpSend reaches every socket on the topic
    assert heard(watcher) == "http-ann"

    lapse(server, cause, ann_id, ann_token)
    system = ann.until("system", timeout=15)["payload"]
    assert system["extension"] == "system" and system["status"] == "error" and system["channel"] == "room-1"
    if cause == "expiry":
        assert system["message"].startswith("Token has expired")
    assert ann.until("phx_close")["topic"] == "realtime:room-1"

    # After: nothing reaches ann, nothing of ann's reaches anyone; bob goes on.
    say(bob, "after-bob")
    assert heard(watcher) == "after-bob"
    assert http_send(server, bob_token, "after-http-bob").status_code == 202
    assert heard(watcher) == "after-http-bob"
    assert heard(bob) == "after-http-bob"
    ann.nothing(0.5)
    say(ann, "ghost")
    ref = track(ann, {"who": "ghost"})
    while True:  # each push of a closed channel is refused: Phoenix's "unmatched topic"
        reply = ann.until("phx_reply")
        assert reply["payload"]["status"] == "error"
        if reply["ref"] == ref:
            break
    assert http_send(server, ann_token, "ghost-http").status_code == 401
    watcher.nothing(0.5)
    say(bob, "still-bob")
    assert heard(watcher) == "still-bob"
    bob.nothing(0.5)  # neither ann's broadcast nor her track reached bob

    # A new token, judged against the policies again: ann joins and is heard again.
    if cause != "ban":
        fresh = sign_in(server, "ann@example.com")
        assert ann.join("room-1", private=True, access_token=fresh)["status"] == "ok"
        say(ann, "back")
        assert heard(bob) == "back"


def test_a_lapsed_member_leaves_the_others_presence(start_server):
    """Each token verified in a read of its own (CHUNK = 1): ann's logout lapses hers, not bob's."""
    server = start_server(
        RULES, prelude="import live.access; live.access.CHUNK = 1", REALTIME_RECHECK_SECONDS=RECHECK
    )
    ann_token, _ = sign_up(server, "ann@example.com")
    bob_token, _ = sign_up(server, "bob@example.com")
    ann, bob = member(server, ann_token, "ann"), member(server, bob_token, "bob")
    ref = track(ann, {"name": "ann"})
    assert ann.until("phx_reply")["ref"] == ref
    joined = bob.until("presence_diff")["payload"]
    assert list(joined["joins"]) == ["ann"]
    headers = {"apikey": server.anon, "Authorization": f"Bearer {ann_token}"}
    assert requests.post(f"{server.base}/auth/v1/logout", headers=headers, timeout=10).status_code == 204
    left = bob.until("presence_diff", timeout=15)["payload"]
    assert list(left["leaves"]) == ["ann"] and left["joins"] == {}
    ann.until("phx_close")
    late = Client(server)  # a socket joining now finds ann gone from presence_state
    assert (
        late.join("room-1", private=True, access_token=bob_token, presence={"key": "late"})["status"] == "ok"
    )
    assert late.until("presence_state")["payload"] == {}
    say(late, "to-bob")  # rounds of the re-check later, bob's channel is his still
    assert heard(bob) == "to-bob"


def test_a_new_token_is_judged_against_the_topics_policies_again(start_server):
    server = start_server(RULES)
    ann_token, _ = sign_up(server, "ann@example.com")
    bob_token, _ = sign_up(server, "bob@example.com")
    quiet_token, _ = sign_up(server, "quiet@example.com")
    outsider_token, _ = sign_up(server, "outsider@example.com")
    ann, bob = member(server, ann_token, "ann"), member(server, bob_token, "bob")

    # A token its insert policy refuses: the channel still hears, but says nothing any more.
    ann.send("realtime:room-1", "access_token", {"access_token": quiet_token}, "1")
    deadline = time.monotonic() + 10
    while True:  # the token is verified in a thread: ask until ann is quiet
        say(ann, "probe")
        try:
            bob.until("broadcast", timeout=1.5)  # under load a probe may take a while
        except TimeoutError:
            break
        assert time.monotonic() < deadline
    bob.nothing(1.0)
    ref = track(ann, {"name": "quiet"})
    reply = ann.until("phx_reply")
    assert reply["ref"] == ref and reply["payload"]["status"] == "error"
    say(bob, "to-quiet")
    assert heard(ann) == "to-quiet"

    # Back to a token the policy allows: ann speaks again.
    ann.send("realtime:room-1", "access_token", {"access_token": sign_in(server, "ann@example.com")}, "1")
    deadline = time.monotonic() + 10
    while True:
        say(ann, "again")
        try:
            if heard_within(bob, 0.5):
                break
        except TimeoutError:
            pass
        assert time.monotonic() < deadline

    # A token its select policy refuses: the system message and phx_close, as Supabase ends it.
    ann.send("realtime:room-1", "access_token", {"access_token": outsider_token}, "1")
    system = ann.until("system")["payload"]
    refused = "You do not have permissions to read from this Channel topic: room-1"
    assert system == {"extension": "system", "status": "error", "channel": "room-1", "message": refused}
    ann.until("phx_close")
    say(bob, "after")
    ann.nothing(0.5)

    # An app signing out sends the API key: anon may not read this topic either.
    carol = member(server, sign_up(server, "carol@example.com")[0], "carol")
    carol.send("realtime:room-1", "access_token", {"access_token": server.anon}, "1")
    assert carol.until("system")["payload"]["status"] == "error"
    carol.until("phx_close")
    # A bad token ends it too.
    dave = member(server, sign_up(server, "dave@example.com")[0], "dave")
    dave.send("realtime:room-1", "access_token", {"access_token": "not-a-jwt"}, "1")
    assert dave.until("system")["payload"]["status"] == "error"
    dave.until("phx_close")


def heard_within(client, timeout):
    deadline = time.monotonic() + timeout
    while True:
        message = client.recv(max(0.01, deadline - time.monotonic()))
        if isinstance(message, bytes) or message["event"] == "broadcast":
            return True
