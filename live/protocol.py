"""Phoenix channel frames in the two serializers realtime-js speaks: vsn 1.0.0, a JSON object per
text frame; vsn 2.0.0, a JSON array per text frame, and binary frames for user broadcasts (the
client pushes kind 3, the server sends kind 4), as Supabase's V2 serializer lays them out."""

import json
import struct
from dataclasses import dataclass

V1, V2 = "1.0.0", "2.0.0"
VERSIONS = (V1, V2)
USER_BROADCAST_PUSH, USER_BROADCAST = 3, 4
BINARY, JSON = 0, 1  # a user broadcast's payload encoding


class ProtocolError(Exception):
    """A frame that is not a Phoenix message: the socket that sent it is closed."""


@dataclass(frozen=True)
class UserBroadcast:
    """A broadcast whose payload travels as bytes: `data` is JSON text (encoding JSON) or the
    client's own bytes (encoding BINARY)."""

    event: str
    encoding: int
    data: bytes

    def as_json(self):
        """The {type, event, payload} a JSON frame carries, or None for a binary payload."""
        if self.encoding != JSON:
            return None
        return {"type": "broadcast", "event": self.event, "payload": json.loads(self.data)}


@dataclass(frozen=True)
class Encoded:
    """A payload already in JSON text: framed as it is, not encoded again (a change sent to many
    sockets is encoded once)."""

    text: str


@dataclass(frozen=True)
class Message:
    topic: str
    event: str
    payload: object  # a dict, a UserBroadcast, or Encoded
    ref: str | None = None
    join_ref: str | None = None


def decode(frame, vsn):
    """The Message of one frame (str for text, bytes for binary); ProtocolError when it is none."""
    if isinstance(frame, bytes):
        if vsn != V2:
            raise ProtocolError("binary frames need vsn 2.0.0")
        return _decode_binary(frame)
    try:
        data = json.loads(frame)
    except ValueError:
        raise ProtocolError("a frame is not JSON") from None
    if vsn == V1:
        if not isinstance(data, dict):
            raise ProtocolError("expected a JSON object")
        fields = (
            data.get("join_ref"),
            data.get("ref"),
            data.get("topic"),
            data.get("event"),
            data.get("payload"),
        )
    else:
        if not isinstance(data, list) or len(data) < 5:
            raise ProtocolError("expected a V2 array")
        fields = tuple(data[:5])
    join_ref, ref, topic, event, payload = fields
    if not isinstance(topic, str) or not isinstance(event, str) or not isinstance(payload, dict):
        raise ProtocolError("a message needs a topic, an event and an object payload")
    if not all(value is None or isinstance(value, str | int) for value in (join_ref, ref)):
        raise ProtocolError("refs are strings")
    return Message(topic, event, payload, _text(ref), _text(join_ref))


def _text(value):
    return None if value is None else str(value)


def _decode_binary(frame):
    if len(frame) < 7 or frame[0] != USER_BROADCAST_PUSH:
        raise ProtocolError("unknown binary frame")
    sizes = frame[1:6]
    encoding = frame[6]
    offset, parts = 7, []
    for size in sizes:
        parts.append(frame[offset : offset + size])
        offset += size
    if offset > len(frame) or encoding not in (BINARY, JSON):
        raise ProtocolError("a truncated binary frame")
    join_ref, ref, topic, event, _metadata = parts
    data = frame[offset:]
    try:
        join_ref, ref, topic, event = (part.decode() for part in (join_ref, ref, topic, event))
        if encoding == JSON:
            json.loads(data)
    except ValueError:
        raise ProtocolError("a binary frame with text that does not decode") from None
    return Message(
        topic, "broadcast", UserBroadcast(event, encoding, bytes(data)), ref or None, join_ref or None
    )


def encode(message, vsn):
    """The frame of `message` for a socket of `vsn`: str (text) or bytes (binary); None when that
    serializer cannot carry it (a binary payload to a vsn 1.0.0 socket)."""
    payload = message.payload
    if isinstance(payload, UserBroadcast):
        if vsn == V2:
            return _encode_user_broadcast(message.topic, payload)
        payload = payload.as_json()
        if payload is None:
            return None
    if isinstance(payload, Encoded):
        return _frame(message, payload.text, vsn)
    if vsn == V1:
        return json.dumps(
            {"topic": message.topic, "event": message.event, "payload": payload, "ref": message.ref,
             "join_ref": message.join_ref},
            separators=(",", ":"),
        )  # fmt: skip
    return json.dumps(
        [message.join_ref, message.ref, message.topic, message.event, payload], separators=(",", ":")
    )


def _frame(message, payload, vsn):
    """The frame json.dumps would make of `message`, with `payload` (JSON text) put in as it is."""
    topic, event = json.dumps(message.topic), json.dumps(message.event)
    ref, join_ref = json.dumps(message.ref), json.dumps(message.join_ref)
    if vsn == V1:
        return f'{{"topic":{topic},"event":{event},"payload":{payload},"ref":{ref},"join_ref":{join_ref}}}'
    return f"[{join_ref},{ref},{topic},{event},{payload}]"


def _encode_user_broadcast(topic, broadcast):
    topic_bytes, event_bytes = topic.encode(), broadcast.event.encode()
    if len(topic_bytes) > 255 or len(event_bytes) > 255:
        return None
    header = struct.pack("5B", USER_BROADCAST, len(topic_bytes), len(event_bytes), 0, broadcast.encoding)
    return header + topic_bytes + event_bytes + broadcast.data


def wire(frame):
    """The WebSocket frame (RFC 6455 section 5.2) of `frame` (str: text, bytes: binary) as a server
    sends it: final, unmasked, no extension (the service negotiates none), so the same bytes go to
    every socket. What the websockets library writes for it (tests/live/test_protocol.py)."""
    data, opcode = (frame.encode(), 0x81) if isinstance(frame, str) else (frame, 0x82)
    size = len(data)
    if size < 126:
        return bytes((opcode, size)) + data
    if size < 65536:
        return struct.pack("!BBH", opcode, 126, size) + data
    return struct.pack("!BBQ", opcode, 127, size) + data


def reply(message, status, response=None):
    """The phx_reply to `message`."""
    return Message(
        message.topic,
        "phx_reply",
        {"status": status, "response": response or {}},
        message.ref,
        message.join_ref,
    )
