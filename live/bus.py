"""Several instances (or WORKERS): broadcasts and presence diffs pass between them through Redis
pub/sub (REALTIME_REDIS_URL, by default the rate limits' Redis), so a socket on one instance hears
a socket on another. Each instance publishes what its own sockets send, once, and delivers what
the others publish to its own sockets only: nothing is sent twice. Postgres changes need no bus:
every instance reads the database's change log itself; the bus only tells the others that this
instance committed, so that they read the log at once rather than at their next poll.

Presence: each instance keeps the others' tracked presences from their diffs, so presence_state
on joining holds them all. An instance that dies without its sockets leaving leaves its
presences behind until the others restart."""

import asyncio
import base64
import json
import logging
import uuid

from live.protocol import UserBroadcast

log = logging.getLogger("minibase")
CHANNEL = "minibase:realtime"
QUEUE = 10000  # messages waiting to be published before new ones are dropped (Redis is down)


def url_for(config):
    """REALTIME_REDIS_URL, else the rate limits' Redis, else None (one instance, no bus)."""
    url = config.get("REALTIME_REDIS_URL") or ""
    if not url and config.get("RATE_LIMIT_STORAGE_URI", "").startswith(("redis://", "rediss://")):
        url = config["RATE_LIMIT_STORAGE_URI"]
    return url or None


def _encode(payload):
    if isinstance(payload, UserBroadcast):
        return {"user": [payload.event, payload.encoding, base64.b64encode(payload.data).decode()]}
    return {"json": payload}


def _decode(value):
    if "user" in value:
        event, encoding, data = value["user"]
        return UserBroadcast(event, encoding, base64.b64decode(data))
    return value["json"]


class Bus:
    def __init__(self, url, hub):
        self.url, self.hub = url, hub
        self.origin = uuid.uuid4().hex
        self.outbox = asyncio.Queue(QUEUE)
        self.tasks = []
        self.client = None
        self.on_commit = None  # called when another instance committed (changes.Feed.told)
        self.commit = json.dumps({"origin": self.origin, "kind": "commit"})
        self.commit_queued = False  # a commit message waits to be published: it covers the next ones

    async def start(self):
        import redis.asyncio as redis

        self.client = redis.from_url(self.url)
        self.tasks = [
            asyncio.create_task(self._listen(self.client.pubsub())),
            asyncio.create_task(self._publish()),
        ]
        log.info("realtime: broadcasts and presence shared with other instances through Redis")

    async def stop(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.client is not None:
            await self.client.aclose()

    def broadcast(self, key, payload):
        self._send({"kind": "broadcast", "key": key, "payload": _encode(payload)})

    def presence(self, key, diff):
        self._send({"kind": "presence", "key": key, "diff": diff})

    def committed(self):
        """This instance committed: the others read the change log now. One message stands for all
        the commits made while it waits to be published (its receivers read after all of them)."""
        if self.commit_queued:
            return
        try:
            self.outbox.put_nowait(self.commit)
            self.commit_queued = True
        except asyncio.QueueFull:  # Redis is down: the others' polls see the change
            pass

    def _send(self, message):
        try:
            self.outbox.put_nowait(json.dumps({"origin": self.origin, **message}))
        except asyncio.QueueFull:
            log.warning("realtime: Redis is not keeping up: a message for the other instances is dropped")

    async def _publish(self):
        while True:
            message = await self.outbox.get()
            if message is self.commit:
                self.commit_queued = False  # a commit from now on needs a message of its own
            while True:
                try:
                    await self.client.publish(CHANNEL, message)
                    break
                except Exception as exc:  # Redis down: wait and try again, in order
                    log.warning("realtime: cannot publish to Redis (%s): trying again", type(exc).__name__)
                    await asyncio.sleep(1)

    async def _listen(self, pubsub):
        while True:
            try:
                await pubsub.subscribe(CHANNEL)
                async for raw in pubsub.listen():
                    if raw.get("type") != "message":
                        continue
                    message = json.loads(raw["data"])
                    if message.get("origin") == self.origin:
                        continue  # our own: our sockets had it already
                    if message["kind"] == "broadcast":
                        self.hub.broadcast(message["key"], _decode(message["payload"]), relay=False)
                    elif message["kind"] == "presence":
                        self.hub.remote_diff(message["key"], message["origin"], message["diff"])
                    elif message["kind"] == "commit" and self.on_commit is not None:
                        self.on_commit()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "realtime: the Redis subscription failed (%s): subscribing again", type(exc).__name__
                )
                await asyncio.sleep(1)
