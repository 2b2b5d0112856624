"""`make bench`'s Realtime figures, each against its goal: the key read served by uvicorn (Realtime
on) against waitress (REALTIME=off); the key read with 1,000 idle sockets open against none, and
/health meanwhile; memory per idle socket; broadcast fan-out to 1,000 sockets, with the p99 of
/health while it runs; and the latency (p50, p99) from a row written with plain SQL to its
delivery to 100 subscribers, to 100 signed-in users under a `:uid` row policy, and to 1,000 of them.

The sockets are opened by client processes of their own (asyncio + websockets), so the clients'
own work does not run in the server's process; on this shared 2-core machine they do share its
cores, which bounds the fan-out figure. The load average is printed before and after: figures
taken on a busy machine are not comparable. Environment: BENCH_SECONDS (5 a wrk figure);
BENCH_ONLY=changes or BENCH_ONLY=fanout (only those figures, on one server).
"""

import asyncio
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from auth import tokens  # noqa: E402
from tools.servers import LOGS, SECRET, TABLES_TOML, measures, rss_mb, seed, start_minibase, stop  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
KEY_READ = "/rest/v1/items?id=eq.4242"
ROWS = 20000
IDLE = 1000
SUBSCRIBERS = 100
CHANGES = 100
CHANGE_PAUSE = 0.1  # 10 changes a second: 1,000 deliveries a second to the 100 subscribers
FAN_OUT = 1000
BROADCASTS = 50
MANY = 1000  # signed-in subscribers of the largest latency figure
HEALTH_PAUSE = 0.01  # between two /health requests while the fan-out runs
ONLY = os.environ.get("BENCH_ONLY", "")
FEED_TOML = TABLES_TOML + (
    '\n[tables.feed]\nselect = "anon"\nrealtime = true\n'
    '\n[tables.posts]\nselect = "authenticated"\nrealtime = true\n'
    '[tables.posts.policies]\nselect = "published = 1 OR author_id = :uid"\n'
)


def wrk(base, key, seconds=SECONDS):
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds:g}s", "-H", f"apikey: {key}", base + KEY_READ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(next(line for line in out.splitlines() if "Requests/sec" in line).split()[1])


def socket_url(base, key, vsn="2.0.0"):
    return base.replace("http://", "ws://") + f"/realtime/v1/websocket?apikey={key}&vsn={vsn}"


def _allow_files(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, needed), hard), hard))


async def _open(url, count, topic, config, ready, done, report=None, tokens=None):
    """`count` sockets joined to `topic` (the nth with tokens[n], when given); `ready` is set when all
    are; each frame of an event of interest goes to `report(received_at, frame)`; they stay open
    until `done` is set."""
    import websockets

    async def one(n):
        async with websockets.connect(url, max_size=None, open_timeout=60, ping_interval=None) as ws:
            payload = {"config": config, **({"access_token": tokens[n]} if tokens else {})}
            join = [str(n), str(n), f"realtime:{topic}", "phx_join", payload]
            await ws.send(json.dumps(join))
            while True:
                frame = json.loads(await ws.recv())
                if frame[3] == "phx_reply":
                    assert frame[4]["status"] == "ok", frame
                    break
            joined.append(n)
            if len(joined) == count:
                ready.set()
            async for frame in ws:  # waits without waking: an idle socket costs the client nothing
                if report is not None:
                    report(time.time(), frame)

    joined = []
    tasks = []
    for n in range(count):
        tasks.append(asyncio.create_task(one(n)))
        if n % 50 == 49:
            await asyncio.sleep(0.05)  # a burst of a thousand handshakes overflows the backlog
    await done.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _clients(url, count, topic, config, ready, done, results, tokens=None):
    """A client process: `count` sockets; what they received goes to `results` at the end."""
    _allow_files(count + 100)
    received = []

    async def main():
        asyncio_ready, asyncio_done = asyncio.Event(), asyncio.Event()

        async def bridge():
            await asyncio_ready.wait()
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.05)
            asyncio_done.set()

        await asyncio.gather(
            _open(
                url,
                count,
                topic,
                config,
                asyncio_ready,
                asyncio_done,
                lambda at, f: received.append((at, f)),
                tokens,
            ),
            bridge(),
        )

    asyncio.run(main())
    results.put(received)


class Sockets:
    """`count` sockets in `processes` client processes, joined to `topic`, the nth with the access
    token tokens[n] when they are given."""

    def __init__(self, url, count, topic, config=None, processes=2, tokens=None):
        self.done = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.readies = []
        self.processes = []
        config = config or {"broadcast": {}, "presence": {"enabled": False}, "postgres_changes": []}
        start = 0
        for part in range(processes):
            ready = multiprocessing.Event()
            share = count // processes + (1 if part < count % processes else 0)
            mine = tokens[start : start + share] if tokens else None
            start += share
            process = multiprocessing.Process(
                target=_clients, args=(url, share, topic, config, ready, self.done, self.results, mine)
            )
            process.start()
            self.readies.append(ready)
            self.processes.append(process)
        deadline = time.monotonic() + 180
        for ready in self.readies:
            if not ready.wait(max(1, deadline - time.monotonic())):
                self.close()
                raise SystemExit(f"{count} sockets did not all join; see {LOGS}")

    def close(self):
        self.done.set()
        received = []
        for _ in self.processes:
            try:
                received.extend(self.results.get(timeout=30))
            except Exception:
                break
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        return received


def bench_serving(workdir, url, key, tables):
    """The key read under uvicorn (Realtime on) and under waitress, alternated, three rounds each."""
    uvicorn, uvicorn_base = start_minibase(workdir, url, tables, BCRYPT_ROUNDS=4)
    waitress, waitress_base = start_minibase(workdir, url, tables, REALTIME="off")
    rates = {"uvicorn": [], "waitress": []}
    try:
        wrk(uvicorn_base, key, 2)
        wrk(waitress_base, key, 2)
        for _ in range(3):
            rates["waitress"].append(wrk(waitress_base, key))
            rates["uvicorn"].append(wrk(uvicorn_base, key))
    finally:
        stop(waitress)
    return uvicorn, uvicorn_base, {name: statistics.median(values) for name, values in rates.items()}


def bench_idle(server, base, key):
    """The key read with IDLE idle sockets open against none; /health meanwhile; memory a socket."""
    none = wrk(base, key)
    before = rss_mb(server)
    sockets = Sockets(socket_url(base, key), IDLE, "idle")
    try:
        time.sleep(1)
        after = rss_mb(server)
        health = requests.get(base + "/health", timeout=5).json()
        busy = wrk(base, key)
    finally:
        sockets.close()
    return none, busy, health, (after - before) * 1024 / IDLE


class Health:
    """/health asked in a loop, one request at a time, in a thread, until stopped: the latencies."""

    def __init__(self, base):
        self.base, self.times, self.running = base, [], True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        with requests.Session() as session:
            while self.running:
                started = time.perf_counter()
                session.get(self.base + "/health", timeout=30).raise_for_status()
                self.times.append((time.perf_counter() - started) * 1000)
                time.sleep(HEALTH_PAUSE)

    def stop(self):
        """The p99 of /health in ms (None when it never answered)."""
        self.running = False
        self.thread.join()
        return percentile(sorted(self.times), 0.99)


def percentile(ordered, fraction):
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else None


def bench_fan_out(base, key):
    """Messages delivered a second when one socket broadcasts to FAN_OUT others, and the p99 of
    /health meanwhile, in ms."""
    import websockets.sync.client as client

    sockets = Sockets(socket_url(base, key), FAN_OUT, "fan")
    health = None
    try:
        with client.connect(socket_url(base, key), max_size=None) as sender:
            sender.send(
                json.dumps(["1", "1", "realtime:fan", "phx_join", {"config": {"broadcast": {"ack": True}}}])
            )
            sender.recv(timeout=10)
            health = Health(base)
            started = time.time()
            for n in range(BROADCASTS):
                payload = {"type": "broadcast", "event": "tick", "payload": {"n": n, "at": time.time()}}
                sender.send(json.dumps(["1", str(n + 2), "realtime:fan", "broadcast", payload]))
            for _ in range(BROADCASTS):
                sender.recv(timeout=30)  # the acks: each broadcast handed out to every socket's queue
            time.sleep(5)
    finally:
        health_p99 = health.stop() if health is not None else None
        received = sockets.close()
    ticks = [at for at, frame in received if '"tick"' in frame]
    last = max(ticks) if ticks else started
    return len(ticks), len(ticks) / max(last - started, 1e-6), health_p99


def sign_up(base, key, count):
    """The access tokens of `count` new users."""
    found = []
    for n in range(count):
        body = {"email": f"reader{n}-{time.time_ns()}@example.com", "password": "bench-password"}
        answer = requests.post(base + "/auth/v1/signup", json=body, headers={"apikey": key}, timeout=30)
        answer.raise_for_status()
        found.append(answer.json()["access_token"])
    return found


def bench_changes(base, key, url, table="feed", tokens=None):
    """Latency from a row written with plain SQL to its delivery to each of SUBSCRIBERS sockets (or
    one a token): on `feed`, which anon reads, or on `posts` (with `tokens`), each subscriber a user
    of its own whose row policy the database evaluates on every change."""
    config = {"broadcast": {}, "presence": {"enabled": False},
              "postgres_changes": [{"event": "INSERT", "schema": "public", "table": table}]}  # fmt: skip
    count = len(tokens) if tokens else SUBSCRIBERS
    sockets = Sockets(socket_url(base, key), count, table, config, processes=2 + count // 500, tokens=tokens)
    engine = sa.create_engine(url)
    insert = {
        "feed": "INSERT INTO feed (at) VALUES (:at)",
        "posts": "INSERT INTO posts (at, published, author_id) VALUES (:at, 1, 0)",
    }[table]
    try:
        time.sleep(0.5)
        for _ in range(CHANGES):
            with engine.begin() as connection:
                connection.execute(sa.text(insert), {"at": time.time()})
            time.sleep(CHANGE_PAUSE)
        time.sleep(2)
    finally:
        received = sockets.close()
        engine.dispose()
    delays = []
    for at, frame in received:
        message = json.loads(frame)
        if message[3] == "postgres_changes":
            delays.append((at - message[4]["data"]["record"]["at"]) * 1000)
    delays.sort()
    return len(delays), percentile(delays, 0.5), percentile(delays, 0.99)


def _ms(value):
    return f"{value:.1f}" if value else "-"


def main():
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-realtime-"))
    LOGS.mkdir(exist_ok=True)
    _allow_files(4096)
    url = f"sqlite:///{workdir}/bench.db"
    seed(url, ROWS)
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE feed (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL)"))
        connection.execute(
            sa.text(
                "CREATE TABLE posts (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL, published INTEGER, "
                "author_id INTEGER)"
            )
        )
    engine.dispose()
    key = tokens.api_key("anon", SECRET)
    before = _load()
    print(f"\nRealtime, SQLite, {ROWS} rows; wrk -t2 -c16, {SECONDS:g} s a figure; load {before}")
    rates = fan = changes = None
    if ONLY:
        server, base = start_minibase(workdir, url, FEED_TOML, BCRYPT_ROUNDS=4)
    else:
        server, base, rates = bench_serving(workdir, url, key, FEED_TOML)
    try:
        if not ONLY:
            idle = bench_idle(server, base, key)
        if ONLY in ("", "fanout"):
            fan = bench_fan_out(base, key)
        if ONLY in ("", "changes"):
            signed_in = sign_up(base, key, MANY)
            changes = (
                bench_changes(base, key, url),
                bench_changes(base, key, url, "posts", signed_in[:SUBSCRIBERS]),
                bench_changes(base, key, url, "posts", signed_in),
            )
    finally:
        stop(server)
    rows = []
    if rates is not None:
        rows += serving_rows(rates, *idle)
    if fan is not None:
        delivered, rate, health_p99 = fan
        wanted = BROADCASTS * FAN_OUT
        rows += [
            (f"broadcast fan-out to {FAN_OUT} sockets, per s", f"{rate:.0f}", ">= 10000", rate >= 10000),
            (f"  of {BROADCASTS} broadcasts", str(delivered), str(wanted), delivered == wanted),
            ("  /health meanwhile, p99 ms", _ms(health_p99), "< 50", bool(health_p99 and health_p99 < 50)),
        ]  # fmt: skip
    if changes is not None:
        rows += change_rows(*changes)
    print(f"\nThe Realtime goals, measured in this run (load {before} before, {_load()} after)")
    print(f"  {'figure':<58} {'value':>9} {'goal':>9}  met")
    for label, value, goal, met in rows:
        print(f"  {label:<58} {value:>9} {goal:>9}  {'-' if met is None else 'met' if met else 'NOT MET'}")


def serving_rows(rates, none, busy, health, per_socket):
    ratio, idle = rates["uvicorn"] / rates["waitress"], busy / none
    print(
        f"  key read: waitress {rates['waitress']:.0f}, uvicorn {rates['uvicorn']:.0f} req/s (medians of 3)"
    )
    print(f"  with {IDLE} idle sockets: {busy:.0f} req/s against {none:.0f} with none")
    status = health.get("status", "?")
    return [
        ("key read, waitress (REALTIME=off), req/s", f"{rates['waitress']:.0f}", "", None),
        ("key read, uvicorn + Realtime, req/s", f"{rates['uvicorn']:.0f}", "", None),
        ("key read: uvicorn / waitress", f"{ratio:.2f}", ">= 0.9", ratio >= 0.9),
        (f"key read with {IDLE} idle sockets / with none", f"{idle:.2f}", ">= 0.9", idle >= 0.9),
        (f"/health with {IDLE} sockets open", status, "ok", status == "ok"),
        ("memory per idle socket, KB", f"{per_socket:.1f}", "< 50", per_socket < 50),
    ]


def change_rows(anon, users, many):
    rows = []
    for label, (count, p50, p99), subscribers, goal in (
        (f"change to delivery, {SUBSCRIBERS} subscribers", anon, SUBSCRIBERS, 100),
        (f"  the same, {SUBSCRIBERS} users under a row policy", users, SUBSCRIBERS, 100),
        (f"  the same, {MANY} users under a row policy", many, MANY, 250),
    ):
        wanted = CHANGES * subscribers
        rows += [
            (f"{label}, p50 ms", _ms(p50), "", None),
            (f"{label}, p99 ms", _ms(p99), f"< {goal}", bool(p99 and p99 < goal)),
            (f"    of {CHANGES} changes, 10 a second", str(count), str(wanted), count == wanted),
        ]
    return rows


def _load():
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__" and measures("bench_realtime"):
    main()
