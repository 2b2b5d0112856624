"""Who is joined to which topic in this process, and the fan-out to them: one bounded outbox per
socket, so a broadcast never waits on a slow reader (a socket whose outbox is full is closed);
and Presence, the tracked state per topic and its diffs."""

import asyncio
import collections
import itertools
import logging

import metrics
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

    def __init__(self, vsn, outbox_limit, write_wire=None):
        self.vsn = vsn
        self.channels = {}  # topic -> Channel
        self.outbox = collections.deque()
        self.outbox_limit = outbox_limit
        self.ready = asyncio.Event()
        self.close_code = None  # set: the writer sends this close code and the session ends
        self.close_reason = ""
        self.write_wire = write_wire  # the server's: framed bytes written at once (True) or not
        self.sending = False  # the writer holds a frame taken from the outbox that may not be out yet

    def send(self, message):
        self.send_frame(protocol.encode(message, self.vsn))

    def send_frame(self, frame, framed=None):
        """Queue `frame` for the writer, or, when nothing is queued or being sent before it, write it
        at once where the server lets the app frame it (`framed`: its protocol.wire, when the caller
        made it once for many sockets)."""
        if frame is None or self.close_code is not None:
            return
        if self.write_wire is not None and not self.outbox and not self.sending:
            if self.write_wire(framed or protocol.wire(frame)):
                metrics.REALTIME_DELIVERIES.inc()
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
        self.may_track = True  # ... and track its presence
        self.who, self.token = who, token
        self.subscriptions = []  # postgres changes: live.changes.Subscription
        self.authorized = True  # False once its token expired or was revoked, until a fresh one
        self.presence_ref = None  # the ref of what this channel tracks, when it tracks
        self.expiry = None  # the task that ends what its token gave when the token expires

    @property
    def lapsed(self):
        """A private channel whose token no longer holds: it neither hears nor speaks on its topic."""
        return self.private and not self.authorized

    @property
    def key(self):
        """Where its broadcasts and presence live: a private topic is not the public one of that name."""
        return ("private:" if self.private else "") + self.topic

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
        self.remote = collections.defaultdict(dict)  # key -> {instance: {name: {ref: meta}}} (live.bus)
        self.bus = None  # live.bus.Bus when several instances share broadcasts and presence

    def add(self, channel):
        self.topics[channel.key].add(channel)

    def remove(self, channel):
        self.untrack(channel)
        members = self.topics.get(channel.key)
        if members is not None:
            members.discard(channel)
            if not members:
                del self.topics[channel.key]

    def channels(self, key):
        return tuple(self.topics.get(key, ()))

    def broadcast(self, key, payload, sender=None, relay=True):
        """`payload` ({type, event, payload} or a UserBroadcast) to every channel at `key` (a
        Channel.key) but `sender`, encoded once per serializer; and to the other instances (`relay`)."""
        if sender is not None and sender.lapsed:
            return
        if relay and self.bus is not None:
            self.bus.broadcast(key, payload)
        members = self.channels(key)
        if not members:
            return
        message = Message(members[0].topic, "broadcast", payload)
        frames = {}  # vsn -> (frame, its wire bytes)
        for channel in members:
            if channel is sender or channel.lapsed:
                continue
            vsn = channel.connection.vsn
            if vsn not in frames:
                frame = protocol.encode(message, vsn)
                frames[vsn] = (frame, None if frame is None else protocol.wire(frame))
            channel.connection.send_frame(*frames[vsn])

    def presence_state(self, key):
        state = {}
        for tracked in (self.presences.get(key, {}), *self.remote.get(key, {}).values()):
            for name, refs in tracked.items():
                metas = state.setdefault(name, {"metas": []})["metas"]
                metas.extend({"phx_ref": ref, **meta} for ref, meta in refs.items())
        return state

    def remote_diff(self, key, instance, diff):
        """A presence diff of another instance's sockets: kept for presence_state, and told here."""
        tracked = self.remote[key].setdefault(instance, {})
        for name, entry in diff.get("leaves", {}).items():
            for meta in entry.get("metas", []):
                tracked.get(name, {}).pop(meta.get("phx_ref"), None)
            if not tracked.get(name, True):
                del tracked[name]
        for name, entry in diff.get("joins", {}).items():
            for meta in entry.get("metas", []):
                fields = {k: v for k, v in meta.items() if k not in ("phx_ref", "phx_ref_prev")}
                tracked.setdefault(name, {})[meta.get("phx_ref")] = fields
        if not tracked:
            del self.remote[key][instance]
        if not self.remote[key]:
            del self.remote[key]
        self._deliver_diff(key, diff)

    def track(self, channel, meta):
        if channel.lapsed:
            return
        refs = self.presences[channel.key].setdefault(channel.presence_key, {})
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
        self._diff(channel.key, {channel.presence_key: {"metas": [joined]}}, leaves)

    def untrack(self, channel):
        ref, channel.presence_ref = channel.presence_ref, None
        topic_presences = self.presences.get(channel.key)
        if ref is None or topic_presences is None:
            return
        refs = topic_presences.get(channel.presence_key, {})
        meta = refs.pop(ref, None)
        if not refs:
            topic_presences.pop(channel.presence_key, None)
        if not topic_presences:
            del self.presences[channel.key]
        if meta is not None:
            self._diff(channel.key, {}, {channel.presence_key: {"metas": [{"phx_ref": ref, **meta}]}})

    def _diff(self, key, joins, leaves):
        payload = {"joins": joins, "leaves": leaves}
        if self.bus is not None:
            self.bus.presence(key, payload)
        self._deliver_diff(key, payload)

    def _deliver_diff(self, key, payload):
        for channel in self.channels(key):
            if not channel.lapsed and (channel.presence_enabled or channel.presence_ref is not None):
                channel.push("presence_diff", payload)

    def close_all(self, code, reason=""):
        for connection in tuple(self.connections):
            connection.close(code, reason)
