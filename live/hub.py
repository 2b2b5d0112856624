"""Who is joined to which topic in this process, and the fan-out to them: one bounded outbox per
socket, so a broadcast never waits on a slow reader (a socket whose outbox is full is closed);
and Presence, the tracked state per topic and its diffs."""

import asyncio
import collections
import itertools
import logging

from live import protocol
from live.protocol import Message

log = logging.getLogger("minibase")
_refs = itertools.count(1)

GOING_AWAY = 1001
POLICY_VIOLATION = 1008
INVALID_DATA = 1007
TOO_SLOW = 1013  # "try again later": the client did not read what it was sent


class Connection:
    """One socket: its serializer, its channels by topic, and the frames waiting to be written."""

    def __init__(self, vsn, outbox_limit):
        self.vsn = vsn
        self.channels = {}  # topic -> Channel
        self.outbox = collections.deque()
        self.outbox_limit = outbox_limit
        self.ready = asyncio.Event()
        self.close_code = None  # set: the writer sends this close code and the session ends
        self.close_reason = ""

    def send(self, message):
        self.send_frame(protocol.encode(message, self.vsn))

    def send_frame(self, frame):
        if frame is None or self.close_code is not None:
            return
        if len(self.outbox) >= self.outbox_limit:
            log.warning("realtime: a socket did not read %s messages: closed", self.outbox_limit)
            self.close(TOO_SLOW, "too many unread messages")
            return
        self.outbox.append(frame)
        self.ready.set()

    def close(self, code, reason=""):
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
            self.outbox.clear()
            self.ready.set()


class Channel:
    """A socket joined to a topic, with what its join asked for and who it is."""

    def __init__(self, connection, topic, join_ref, config, who, token):
        self.connection, self.topic, self.join_ref = connection, topic, join_ref
        broadcast = config.get("broadcast") or {}
        presence = config.get("presence") or {}
        self.self_broadcast = broadcast.get("self") is True
        self.ack = broadcast.get("ack") is True
        self.presence_key = str(presence.get("key") or "") or f"presence-{next(_refs)}"
        self.presence_enabled = presence.get("enabled", True) is not False
        self.private = config.get("private") is True
        self.may_send = True  # a private channel's: whether its policy lets it broadcast
        self.who, self.token = who, token
        self.subscriptions = []  # postgres changes: realtime.changes.Subscription
        self.authorized = True  # False once its token expired or was revoked, until a fresh one
        self.presence_ref = None  # the ref of what this channel tracks, when it tracks

    @property
    def name(self):
        return self.topic.removeprefix("realtime:")

    def push(self, event, payload):
        self.connection.send(Message(self.topic, event, payload, None, self.join_ref))

    def system(self, extension, status, message):
        self.push(
            "system", {"extension": extension, "status": status, "message": message, "channel": self.name}
        )


class Hub:
    """The channels of this process by topic, and the presences tracked on each topic."""

    def __init__(self):
        self.topics = collections.defaultdict(set)  # topic -> {Channel}
        self.presences = collections.defaultdict(dict)  # topic -> {key: {ref: meta}}
        self.connections = set()  # every open socket, joined or not

    def add(self, channel):
        self.topics[channel.topic].add(channel)

    def remove(self, channel):
        self.untrack(channel)
        members = self.topics.get(channel.topic)
        if members is not None:
            members.discard(channel)
            if not members:
                del self.topics[channel.topic]

    def channels(self, topic):
        return tuple(self.topics.get(topic, ()))

    def broadcast(self, topic, payload, sender=None):
        """`payload` ({type, event, payload} or a UserBroadcast) to every channel on `topic` but
        `sender`, encoded once per serializer."""
        message = Message(topic, "broadcast", payload)
        frames = {}
        for channel in self.channels(topic):
            if channel is sender:
                continue
            vsn = channel.connection.vsn
            if vsn not in frames:
                frames[vsn] = protocol.encode(message, vsn)
            channel.connection.send_frame(frames[vsn])

    def presence_state(self, topic):
        return {
            key: {"metas": [{"phx_ref": ref, **meta} for ref, meta in refs.items()]}
            for key, refs in self.presences.get(topic, {}).items()
        }

    def track(self, channel, meta):
        refs = self.presences[channel.topic].setdefault(channel.presence_key, {})
        leaves = {}
        previous = channel.presence_ref
        if previous is not None and previous in refs:
            leaves = {channel.presence_key: {"metas": [{"phx_ref": previous, **refs.pop(previous)}]}}
        ref = f"F{next(_refs)}"
        refs[ref] = meta
        channel.presence_ref = ref
        joined = {"phx_ref": ref, **meta}
        if previous is not None:
            joined["phx_ref_prev"] = previous
        self._diff(channel.topic, {channel.presence_key: {"metas": [joined]}}, leaves)

    def untrack(self, channel):
        ref, channel.presence_ref = channel.presence_ref, None
        topic_presences = self.presences.get(channel.topic)
        if ref is None or topic_presences is None:
            return
        refs = topic_presences.get(channel.presence_key, {})
        meta = refs.pop(ref, None)
        if not refs:
            topic_presences.pop(channel.presence_key, None)
        if not topic_presences:
            del self.presences[channel.topic]
        if meta is not None:
            self._diff(channel.topic, {}, {channel.presence_key: {"metas": [{"phx_ref": ref, **meta}]}})

    def _diff(self, topic, joins, leaves):
        payload = {"joins": joins, "leaves": leaves}
        for channel in self.channels(topic):
            if channel.presence_enabled or channel.presence_ref is not None:
                channel.push("presence_diff", payload)

    def close_all(self, code, reason=""):
        for connection in tuple(self.connections):
            connection.close(code, reason)
