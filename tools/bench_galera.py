"""`make bench-galera`: sign-ups/s and writes/s through three instances on a three-node Galera cluster
(one instance per node, limits in Redis) against one instance on one plain MariaDB, side by side in
one run, with how often the cluster refused a commit and the write was run again.

Everything runs on this machine (on 2 cores, the cluster's three servers and three instances share
them with the load): the figures compare the two set-ups, they are not a cluster's capacity.

- sign-ups: POST /auth/v1/signup of new addresses (bcrypt at BCRYPT_ROUNDS, 10 by default);
- inserts: POST /rest/v1/items of new rows;
- one hot row: PATCH /rest/v1/items?id=eq.1, every client the same row (the worst case for
  certification: every concurrent pair on two nodes conflicts)."""

import itertools
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from auth import tokens  # noqa: E402
from tools import galera, servers  # noqa: E402

SECONDS = 10
CLIENTS = 16
TABLES = """
[tables.items]
select = "anon"
insert = "anon"
update = "anon"
"""
KEY = tokens.api_key("anon", servers.SECRET)
RETRY = re.compile(r"trying again \(attempt (\d+)\)")


def load(bases, request, seconds=SECONDS, clients=CLIENTS):
    """`request(session, base, n)` from `clients` threads for `seconds`, round robin over `bases`:
    (answers per second, {status: count}, the slowest answer in seconds)."""
    counter, lock, statuses, slowest = itertools.count(), threading.Lock(), {}, [0.0]
    deadline = time.monotonic() + seconds

    def client():
        session = requests.Session()
        session.headers.update({"apikey": KEY})
        while time.monotonic() < deadline:
            n = next(counter)
            started = time.monotonic()
            try:
                status = request(session, bases[n % len(bases)], n).status_code
            except requests.RequestException as exc:
                status = type(exc).__name__
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                slowest[0] = max(slowest[0], time.monotonic() - started)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(statuses.values()) / (time.monotonic() - started), statuses, slowest[0]


def sign_ups(prefix):
    def request(session, base, n):
        body = {"email": f"{prefix}{n}@example.com", "password": "bench-password"}
        return session.post(f"{base}/auth/v1/signup", json=body, timeout=60)

    return request


def inserts(session, base, n):
    body = {"name": f"new {n}", "location": "Oslo", "price": 1.5, "owner_id": n % 50 + 1}
    return session.post(f"{base}/rest/v1/items", json=body, timeout=60)


def hot_row(session, base, n):
    return session.patch(f"{base}/rest/v1/items?id=eq.1", json={"price": n % 1000}, timeout=60)


def retries(logs):
    """How many units the logs say were run again, and how many ran out of attempts (a 503)."""
    text = "".join(path.read_text(errors="replace") for path in logs if path.exists())
    return len(RETRY.findall(text)), text.count("database unavailable")


def measure(label, bases, logs):
    rows = []
    prefix = re.sub(r"\W", "", label)
    for name, request in (("sign-ups", sign_ups(prefix)), ("inserts", inserts), ("one hot row", hot_row)):
        before = retries(logs)
        rate, statuses, slowest = load(bases, request)
        after = retries(logs)
        rows.append((label, name, rate, statuses, after[0] - before[0], after[1] - before[1], slowest))
        counts = f"retries {after[0] - before[0]:5d}  503s {after[1] - before[1]:3d}"
        print(
            f"  {label:<28} {name:<12} {rate:8.1f} /s  {counts}  slowest {slowest:5.2f} s  {statuses}",
            flush=True,
        )
    return rows


def main():
    if not galera.installed():
        raise SystemExit("bench-galera needs galera-4, mariadb-server and redis-server (apt-get install)")
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-galera-"))
    shutil.rmtree(servers.LOGS, ignore_errors=True)
    servers.LOGS.mkdir()
    processes, cluster, redis = [], None, None
    settings = {"TABLES_CONFIG": str(workdir / "tables.toml"), "THREADS": 16}
    try:
        print(f"wrk-less load: {CLIENTS} clients, {SECONDS} s a figure", flush=True)
        mariadb, url = servers.start_mariadb(workdir)
        processes.append(mariadb)
        servers.seed(url, 1000)
        single, base = servers.start_minibase(workdir, url, tables=TABLES, **settings)
        processes.append(single)
        log = servers.LOGS / "minibase.log"
        rows = measure("1 instance, plain MariaDB", [base], [log])
        servers.stop(single)

        started = time.monotonic()
        cluster = galera.Cluster().start()
        print(f"  (cluster of 3 up in {time.monotonic() - started:.1f} s)", flush=True)
        redis = galera.Redis()
        cluster.nodes[0].query("CREATE DATABASE bench CHARACTER SET utf8mb4")
        servers.seed(cluster.url(0, "bench"), 1000)
        log = servers.LOGS / "minibase.log"
        log.rename(servers.LOGS / "minibase-single.log")  # the three instances append to a new one
        bases = []
        for index in range(3):
            process, base = servers.start_minibase(
                workdir,
                cluster.url(index, "bench"),
                tables=TABLES,
                RATE_LIMIT_STORAGE_URI=redis.url,
                **settings,
            )
            processes.append(process)
            bases.append(base)
        rows += measure("3 instances, Galera x3", bases, [log])
    finally:
        for process in processes:
            servers.stop(process)
        if cluster is not None:
            cluster.stop()
        if redis is not None:
            redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| set-up | load | per second | retried | 503 | slowest |\n|---|---|---:|---:|---:|---:|")
    for label, name, rate, _, retried, failed, slowest in rows:
        print(f"| {label} | {name} | {rate:.1f} | {retried} | {failed} | {slowest:.2f} s |")


if __name__ == "__main__" and servers.measures("bench_galera"):
    main()
