"""One WebSocket as Supabase Realtime serves it: the API key checked before the upgrade, then Phoenix
channels on it (join, leave, heartbeat, broadcast, presence, access_token), one coroutine reading
and one writing, as the `websockets` library's own examples do. The database and the auth service
are called in threads, in the app's context; the socket's own loop never waits on them."""

import asyncio
import json
import logging
import time
from urllib.parse import parse_qs

import metrics
from errors import APIError
from live import access, bus, changes, protocol, topics
from live.hub import GOING_AWAY, INVALID_DATA, POLICY_VIOLATION, Channel, Connection, Hub
from live.protocol import Message, ProtocolError, UserBroadcast

log = logging.getLogger("minibase")
PATH = "/realtime/v1/websocket"
IDLE_SECONDS = 60  # realtime-js heartbeats every 25 s: a socket silent this long is gone
CLOSE_SECONDS = 2  # how long a close frame may take to leave before the connection is dropped
WIRE = "minibase.websocket.wire"  # the server's ASGI extension: frames the app framed (hub.Connection)


class Realtime:
    """The Realtime server of one process: the app whose settings, database and auth it uses, the
    hub of its channels, and the feed of Postgres changes (live/changes.py)."""

    def __init__(self, app):
        self.app = app
        config = app.config
        self.max_channels = config["REALTIME_MAX_CHANNELS"]
        self.max_events = config["REALTIME_MAX_EVENTS"]
        self.max_joins = config["REALTIME_MAX_JOINS"]
        self.outbox_limit = config["REALTIME_MAX_QUEUE"]
        self.recheck_seconds = config["REALTIME_RECHECK_SECONDS"]
        self.hub = Hub()
        self.changes = changes.Feed(self)
        self.stopping = False
        self.loop = None
        self.rechecking = None  # the task that verifies the channels' tokens again (recheck)

    def _in_app(self, work, args):
        with self.app.app_context():
            return work(*args)

    async def call(self, work, *args):
        """`work(*args)` in a thread, in the app's context."""
        return await asyncio.to_thread(self._in_app, work, args)

    def publish(self, key, payload):
        """A broadcast from elsewhere than a socket of this process (the HTTP API)."""
        self.hub.broadcast(key, payload)

    def publish_threadsafe(self, key, payload):
        self.loop.call_soon_threadsafe(self.publish, key, payload)

    async def start(self):
        self.loop = asyncio.get_running_loop()
        self.app.extensions["minibase"].realtime = self
        url = bus.url_for(self.app.config)
        if url is not None:
            self.hub.bus = bus.Bus(url, self.hub)
            self.hub.bus.on_commit = self.changes.told
            await self.hub.bus.start()
        await self.changes.start()
        self.rechecking = asyncio.create_task(self.recheck())

    async def stop(self):
        """Close every socket with 1001 (going away), and stop the change feed."""
        self.stopping = True
        self.hub.close_all(GOING_AWAY, "server shutting down")
        if self.rechecking is not None:
            self.rechecking.cancel()
        await self.changes.stop()
        if self.hub.bus is not None:
            await self.hub.bus.stop()
            self.hub.bus = None

    async def session(self, scope, receive, send):
        """The ASGI conversation of one socket at PATH."""
        if (await receive())["type"] != "websocket.connect":
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        key = (query.get("apikey") or [None])[0] or headers.get("apikey") or headers.get("x-api-key")
        vsn = (query.get("vsn") or [protocol.V1])[0]
        if self.stopping:
            return await _refuse(scope, send, 503, {"message": "Realtime is restarting, please standby"})
        if not key:
            return await _refuse(
                scope,
                send,
                401,
                _key_error(access.MISSING_KEY, "No `apikey` request header or url param was found."),
            )
        role = await self.call(access.key_role, key)
        if role is None:
            return await _refuse(
                scope, send, 401, _key_error(access.INVALID_KEY, "Double check your apikey.")
            )
        if vsn not in protocol.VERSIONS:
            return await _refuse(scope, send, 400, {"message": f"Unsupported serializer version: {vsn[:20]}"})
        await send({"type": "websocket.accept"})
        metrics.REALTIME_SOCKETS.inc()
        wire = scope.get("extensions", {}).get(WIRE) or {}
        connection = Connection(vsn, self.outbox_limit, wire.get("write"))
        socket = Socket(self, connection, role, receive)
        self.hub.connections.add(connection)
        reader = asyncio.create_task(socket.read())
        writer = asyncio.create_task(_write(connection, send))
        try:
            await asyncio.wait((reader, writer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            if not writer.done():
                if connection.close_code is None:
                    connection.close(1000)
                try:
                    await asyncio.wait_for(writer, CLOSE_SECONDS)
                except (TimeoutError, asyncio.CancelledError):
                    pass
            self.hub.connections.discard(connection)
            socket.leave_all()
            metrics.REALTIME_SOCKETS.dec()

    def leave(self, channel):
        """`channel` leaves its topic: no more broadcasts, presence or changes, its presence gone."""
        if channel.expiry is not None:
            channel.expiry.cancel()
            channel.expiry = None
        if channel.connection.channels.get(channel.topic) is channel:
            del channel.connection.channels[channel.topic]
            metrics.REALTIME_CHANNELS.dec()
        self.changes.remove(channel)
        self.hub.remove(channel)

    def lapse(self, channel, why):
        """The channel's token no longer holds (expired, logged out, its user banned or gone, or a new
        token the topic's policies refuse): Supabase's system message, then what the token gave ends.
        A public channel keeps its broadcasts and presence and gets no more changes until a fresh
        token; a private one is closed (phx_close), as Supabase ends it: it hears and says nothing
        more on the topic until it joins again, with a token the policies allow."""
        if not channel.authorized or channel.connection.channels.get(channel.topic) is not channel:
            return
        channel.authorized = False
        channel.system("system", "error", why)
        if channel.private:
            self.leave(channel)
            channel.push("phx_close", {})

    def watch_expiry(self, channel, expires):
        """Lapse `channel` when its token expires (`expires`: a time, or None for a key's)."""
        if channel.expiry is not None:
            channel.expiry.cancel()
            channel.expiry = None
        if expires is not None:
            channel.expiry = asyncio.create_task(self._expire(channel, expires))

    async def _expire(self, channel, expires):
        await asyncio.sleep(max(0.0, expires - time.time()))
        channel.expiry = None
        self.lapse(channel, f"Token has expired {max(0, int(time.time() - expires))} seconds ago")

    async def recheck(self):
        """Every REALTIME_RECHECK_SECONDS, the token of every channel a user holds is verified again,
        with one read of their sessions for all: a logout or a ban made by any instance (or by an
        administrator in the database) lapses the channel within that bound. A database that does
        not answer lapses nothing (the next round tries again)."""
        while True:
            await asyncio.sleep(self.recheck_seconds)
            held = [
                (channel, channel.token)
                for connection in tuple(self.hub.connections)
                for channel in tuple(connection.channels.values())
                if channel.authorized and channel.who.user_id is not None and channel.token
            ]
            if not held:
                continue
            try:
                verdicts = await self.call(access.verify_all, {token for _, token in held})
            except Exception:
                log.exception("realtime: the channels' tokens could not be verified again; trying again")
                continue
            for channel, token in held:
                why = verdicts.get(token)
                if isinstance(why, str) and channel.token == token:
                    self.lapse(channel, why)


def _key_error(message, hint):
    return {"message": message, "hint": hint, "code": 401, "details": ""}


async def _refuse(scope, send, status, body):
    """Answer the upgrade with a JSON error, where the server can (the ASGI http.response extension),
    else close it unaccepted (a 403 from the server)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        data = json.dumps(body).encode()
        await send({
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        })  # fmt: skip
        await send({"type": "websocket.http.response.body", "body": data})
    else:
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})


async def _write(connection, send):
    """Send what the connection's outbox holds, in order, until it is closed."""
    while True:
        await connection.ready.wait()
        connection.ready.clear()
        connection.sending = True
        try:
            while connection.outbox and connection.close_code is None:
                frame = connection.outbox.popleft()
                key = "bytes" if isinstance(frame, bytes) else "text"
                await send({"type": "websocket.send", key: frame})
                metrics.REALTIME_DELIVERIES.inc()
        finally:
            connection.sending = False
        if connection.close_code is not None:
            closing = {
                "type": "websocket.close",
                "code": connection.close_code,
                "reason": connection.close_reason,
            }
            try:
                await asyncio.wait_for(send(closing), CLOSE_SECONDS)
            except (TimeoutError, OSError, RuntimeError):
                pass
            return


class Rate:
    """Events in the current second, against a limit per second."""

    def __init__(self, limit):
        self.limit, self.second, self.count = limit, 0, 0

    def allow(self):
        now = int(time.monotonic())
        if now != self.second:
            self.second, self.count = now, 0
        self.count += 1
        return self.count <= self.limit


class Socket:
    """The reading side of one socket: every frame it sends, in order."""

    def __init__(self, server, connection, role, receive):
        self.server, self.connection, self.role, self.receive = server, connection, role, receive
        self.hub = server.hub
        self.events = Rate(server.max_events)
        self.joins = Rate(server.max_joins)

    async def read(self):
        while self.connection.close_code is None:
            try:
                event = await asyncio.wait_for(self.receive(), IDLE_SECONDS)
            except TimeoutError:
                self.connection.close(1000, "heartbeat timeout")
                return
            if event["type"] == "websocket.disconnect":
                self.connection.close_code = event.get("code", 1000)
                return
            frame = event.get("text") if event.get("text") is not None else event.get("bytes")
            try:
                message = protocol.decode(frame, self.connection.vsn)
            except ProtocolError as exc:
                self.connection.close(INVALID_DATA, str(exc))
                return
            await self.handle(message)

    async def handle(self, message):
        if message.topic == "phoenix":
            if message.event == "heartbeat":
                self.connection.send(protocol.reply(message, "ok"))
            return
        if message.event == "phx_join":
            return await self.join(message)
        channel = self.connection.channels.get(message.topic)
        if channel is None:
            self.connection.send(protocol.reply(message, "error", {"reason": "unmatched topic"}))
            return
        if message.event == "phx_leave":
            self.leave(channel)
            self.connection.send(protocol.reply(message, "ok"))
            self.connection.send(Message(channel.topic, "phx_close", {}, message.ref, channel.join_ref))
        elif message.event == "broadcast":
            self.broadcast(channel, message)
        elif message.event == "presence":
            self.presence(channel, message)
        elif message.event == "access_token":
            await self.access_token(channel, message)

    async def join(self, message):
        payload = message.payload
        config = payload.get("config") if isinstance(payload.get("config"), dict) else {}
        error = None
        if not message.topic.startswith("realtime:"):
            error = "unmatched topic"
        elif message.topic == "realtime:":
            error = "TopicNameRequired: You must provide a topic name"
        elif not self.joins.allow():
            error = "ClientJoinRateLimitReached: Too many joins per second"
        elif (
            message.topic not in self.connection.channels
            and len(self.connection.channels) >= self.server.max_channels
        ):
            error = "ChannelRateLimitReached: Too many channels"
        if error is not None:
            return self.connection.send(protocol.reply(message, "error", {"reason": error}))
        token = payload.get("access_token") or payload.get("user_token")
        token = token if isinstance(token, str) else None
        try:
            who, expires = await self.server.call(access.caller, token, self.role)
        except APIError as exc:
            return self.connection.send(protocol.reply(message, "error", {"reason": access.reason(exc)}))
        channel = Channel(self.connection, message.topic, message.join_ref, config, who, token)
        if channel.private:
            rights = await self.server.call(topics.rights, channel.name, who)
            may_read, channel.may_send, channel.may_track = rights
            if not may_read:
                reason = f"Unauthorized: {unreadable(channel)}"
                return self.connection.send(protocol.reply(message, "error", {"reason": reason}))
        wanted = config.get("postgres_changes") or []
        try:
            subscriptions = await self.server.call(
                changes.subscribe, wanted, who, self.server.changes.captured
            )
        except changes.Refused as exc:
            return self.connection.send(protocol.reply(message, "error", {"reason": str(exc)}))
        previous = self.connection.channels.get(message.topic)
        if previous is not None:  # a second join of a topic replaces the first, as Phoenix does
            self.leave(previous)
            previous.push("phx_close", {})
        channel.subscriptions = subscriptions
        self.connection.channels[message.topic] = channel
        metrics.REALTIME_CHANNELS.inc()
        self.hub.add(channel)
        self.server.changes.add(channel)
        self.connection.send(
            protocol.reply(message, "ok", {"postgres_changes": [s.describe() for s in subscriptions]})
        )
        if channel.presence_enabled:
            channel.push("presence_state", self.hub.presence_state(channel.key))
        if subscriptions:
            channel.system("postgres_changes", "ok", "Subscribed to PostgreSQL")
        self.server.watch_expiry(channel, expires)

    def leave(self, channel):
        self.server.leave(channel)

    def leave_all(self):
        for channel in list(self.connection.channels.values()):
            self.leave(channel)

    def over_limit(self, channel):
        """Whether this push is one too many this second: the channel is told and ended, as Supabase
        ends it."""
        if self.events.allow():
            return False
        channel.system("system", "error", "Too many messages per second")
        self.leave(channel)
        channel.push("phx_close", {})
        return True

    def broadcast(self, channel, message):
        if self.over_limit(channel):
            return
        payload = message.payload
        if not isinstance(payload, UserBroadcast) and not isinstance(payload.get("event"), str):
            return
        if channel.lapsed or channel.private and not channel.may_send:
            return
        self.hub.broadcast(channel.key, payload, sender=None if channel.self_broadcast else channel)
        if channel.ack:
            self.connection.send(protocol.reply(message, "ok"))

    def presence(self, channel, message):
        if self.over_limit(channel):
            return
        event = str(message.payload.get("event", "")).lower()
        if channel.lapsed:
            return self.connection.send(protocol.reply(message, "error", {"reason": "Unauthorized"}))
        if event == "track":
            if channel.private and not channel.may_track:
                return self.connection.send(protocol.reply(message, "error", {"reason": "Unauthorized"}))
            meta = message.payload.get("payload", {})
            if not isinstance(meta, dict):
                reason = "Presence track payload must be a map"
                return self.connection.send(protocol.reply(message, "error", {"reason": reason}))
            self.hub.track(channel, meta)
        elif event == "untrack":
            self.hub.untrack(channel)
        else:
            return self.connection.send(protocol.reply(message, "error", {}))
        self.connection.send(protocol.reply(message, "ok"))

    async def access_token(self, channel, message):
        """A new token for the channel. While it is verified the change feed holds what it has just
        read (Feed.renewing): a change the app commits right after sending the token is judged with
        it, as the app expects, though the token's event has no reply to wait for."""
        self.server.changes.renewing.add(channel)
        try:
            await self.renew(channel, message)
        finally:
            self.server.changes.renewing.discard(channel)

    async def renew(self, channel, message):
        """Judge the new token as a join would: a bad one lapses the channel; on a private channel
        the topic's policies are judged again with it (refused: the channel lapses; allowed: what it
        may send and track follows the new token). An API key (a signed-out app's) is the key's role."""
        token = message.payload.get("access_token")
        if not isinstance(token, str) or token == channel.token:
            return
        try:
            who, expires = await self.server.call(access.caller, token, self.role)
            rights = await self.server.call(topics.rights, channel.name, who) if channel.private else None
        except APIError as exc:
            channel.token = token
            return self.server.lapse(channel, exc.message)
        if self.connection.channels.get(channel.topic) is not channel:
            return  # left (or lapsed) while the token was verified
        channel.token = token
        if rights is not None and not rights[0]:
            return self.server.lapse(channel, unreadable(channel))
        if rights is not None:
            channel.may_send, channel.may_track = rights[1:]
        channel.who, channel.authorized = who, True
        self.server.watch_expiry(channel, expires)


def unreadable(channel):
    return f"You do not have permissions to read from this Channel topic: {channel.name}"
