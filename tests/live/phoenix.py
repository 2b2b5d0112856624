"""A raw Phoenix channels client for the tests: frames as realtime-js sends them, read back one by
one, in either serializer."""

import json
import time

import requests
from websockets.sync.client import connect


class Client:
    """A raw socket speaking vsn 1.0.0 (objects) or 2.0.0 (arrays)."""

    def __init__(self, server, vsn="1.0.0", key=None, sock=None):
        self.vsn = vsn
        self.ws = connect(server.socket_url(key, vsn), open_timeout=5, max_size=None, sock=sock)
        self.ref = 0

    def send(self, topic, event, payload, join_ref=None):
        self.ref += 1
        ref = str(self.ref)
        if self.vsn == "1.0.0":
            frame = {"topic": topic, "event": event, "payload": payload, "ref": ref, "join_ref": join_ref}
        else:
            frame = [join_ref, ref, topic, event, payload]
        self.ws.send(json.dumps(frame))
        return ref

    def recv(self, timeout=5):
        frame = self.ws.recv(timeout=timeout)
        if isinstance(frame, bytes):
            return frame
        data = json.loads(frame)
        if self.vsn == "2.0.0":
            join_ref, ref, topic, event, payload = data
            return {"join_ref": join_ref, "ref": ref, "topic": topic, "event": event, "payload": payload}
        return data

    def until(self, event, timeout=15):
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.01, deadline - time.monotonic()))
            if isinstance(message, dict) and message["event"] == event:
                return message

    def join(self, name, **config):
        token = config.pop("access_token", None)
        payload = {
            "config": {"broadcast": {}, "presence": {"enabled": False}, "postgres_changes": [], **config}
        }
        if token:
            payload["access_token"] = token
        ref = self.send(f"realtime:{name}", "phx_join", payload, join_ref=str(self.ref + 1))
        reply = self.until("phx_reply")
        assert reply["ref"] == ref
        return reply["payload"]

    def handled(self):
        """Return once the server has handled every frame sent before: a socket's frames are handled
        in order, and a heartbeat is answered. What an event with no reply (access_token) awaits."""
        ref = self.send("phoenix", "heartbeat", {})
        while self.until("phx_reply")["ref"] != ref:
            pass

    def nothing(self, timeout=0.3):
        try:
            frame = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return True
        raise AssertionError(f"unexpected frame {frame!r}")

    def close(self):
        self.ws.close()


def change(client, timeout=15):
    """The next postgres_changes message `client` gets: (its subscription ids, its data)."""
    message = client.until("postgres_changes", timeout)
    return message["payload"]["ids"], message["payload"]["data"]


def sign_up(server, email):
    """A user signed up on `server`: (their access token, their id)."""
    body = {"email": email, "password": "secret-pw"}
    session = requests.post(
        f"{server.base}/auth/v1/signup", json=body, headers={"apikey": server.anon}, timeout=10
    )
    assert session.status_code == 200, session.text
    return session.json()["access_token"], int(session.json()["user"]["id"])
