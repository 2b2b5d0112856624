"""POST /realtime/v1/api/broadcast (servers: many messages in one JSON body) and POST
/realtime/v1/api/broadcast/TOPIC/events/EVENT (realtime-js's httpSend: one message, its payload the
body, JSON or bytes): messages handed to the sockets joined to their topics, as a socket's own
broadcast would be. Public topics take any valid key, as joining them does; a private topic takes
the service key, or a caller its [realtime] insert rule and policy allow (live.topics)."""

import json

from errors import APIError, Rest
from live import topics
from live.protocol import BINARY, JSON, UserBroadcast

MAX_MESSAGES = 100


def parse(body):
    """[(topic, event, payload, private)] of the request's body; a 400 naming what is wrong."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        raise _bad(f'the body must be {{"messages": [...]}} with 1 to {MAX_MESSAGES} messages')
    parsed = []
    for message in messages:
        if not isinstance(message, dict):
            raise _bad("each message must be an object with topic, event and payload")
        topic, event = message.get("topic"), message.get("event")
        payload, private = message.get("payload", {}), message.get("private", False)
        if not isinstance(topic, str) or not topic.strip() or len(topic) > 200:
            raise _bad("a message's topic must be a name of 1 to 200 characters")
        if not isinstance(event, str) or not event or len(event) > 200:
            raise _bad("a message's event must be a name of 1 to 200 characters")
        if not isinstance(payload, dict) or not isinstance(private, bool):
            raise _bad("a message's payload must be an object, and private true or false")
        parsed.append((topic.removeprefix("realtime:"), event, payload, private))
    return parsed


def send(server, body, who):
    """Hand every message of `body` to `server`'s sockets (after checking them all: none is sent
    when one is refused)."""
    messages = parse(body)
    _check(messages, who)
    for topic, event, payload, private in messages:
        _publish(server, topic, private, {"type": "broadcast", "event": event, "payload": payload})
    return len(messages)


def send_one(server, topic, event, body, binary, private, who):
    """Hand one message to `server`'s sockets: `body` (bytes) is its payload, JSON text or, when
    `binary`, bytes that only the sockets of serializer 2.0.0 receive, as Supabase sends them."""
    if not topic.strip() or len(topic) > 200 or not event or len(event) > 200:
        raise _bad("the topic and the event must be names of 1 to 200 characters")
    if not binary:
        try:
            json.loads(body)
        except ValueError:
            raise _bad("the body must be JSON, or bytes sent as application/octet-stream") from None
    topic = topic.removeprefix("realtime:")
    _check([(topic, event, None, private)], who)
    _publish(server, topic, private, UserBroadcast(event, BINARY if binary else JSON, bytes(body)))


def _check(messages, who):
    for topic, _, _, private in messages:
        if private and not topics.allowed(topic, who, "insert"):
            status = 401 if who.role == "anon" else 403
            raise APIError(
                status, Rest.INSUFFICIENT_PRIVILEGE, f"You do not have permission to broadcast to {topic}"
            )


def _publish(server, topic, private, payload):
    server.publish_threadsafe(("private:" if private else "") + "realtime:" + topic, payload)


def _bad(message):
    return APIError(400, Rest.BAD_BODY, message)
