"""`make bench`: minibase's hot endpoints against their bounds and a peer, measured in one run, and
one table of the goals at the end, each met or not.

Every server runs in its own process and is loaded by wrk (2 threads, 16 connections) on this
machine: minibase as `make run` serves it (`python wsgi.py`: uvicorn, Realtime on), the bounds
under waitress. An absolute req/s says little on a shared machine, so each figure is a ratio to a
bound measured in the same run: a trivial Flask app under waitress, with the same THREADS, that
reads one row by key with sqlite3, or with PyMySQL on MariaDB, on a connection of the thread's
own, and nothing else. No Flask service can read a row much faster than that.
datasette, the best-known Python JSON-over-SQLite server, serves the same SQLite file as the peer.
Sign-in is bound by bcrypt, so it is compared with bcrypt's own rate instead. The key read is
measured again with WORKERS=2, against itself with one worker.

Environment: BENCH_SECONDS (5 per figure), BENCH_ROWS (20000), BENCH_BIG_ROWS (1000000),
BENCH_SOAK (100000 requests before RSS is read), BENCH_MARIADB (on when mariadbd is installed),
BENCH_ONLY=mysql, BENCH_ONLY=php, BENCH_ONLY=sqlite or BENCH_ONLY=storage (only the MariaDB
figures, only minibase against php-crud-api on MariaDB, only the SQLite reads against their bound
and the embedded read, or only the downloads and uploads against theirs, with their goals: a quick
run when working on them), BENCH_CONNECTIONS (wrk's 16: 64 says how the tail grows). The
php-crud-api rows take api.php from BENCH_PHP_CRUD_API (a path) or download it
(tools/bench_php.py).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import bcrypt
import requests
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from auth import tokens  # noqa: E402
from tools.bench_php import bench_php_crud_api  # noqa: E402
from tools.bench_storage import bench_storage  # noqa: E402
from tools.servers import (  # noqa: E402
    FLOOR_APP,
    LOGS,
    PASSWORD,
    POLICIES_TOML,
    SECRET,
    TABLES_TOML,
    measures,
    rss_mb,
    seed,
    seed_policies,
    sign_up,
    start_ceiling,
    start_datasette,
    start_mariadb,
    start_minibase,
    stop,
)

ROOT = Path(__file__).resolve().parent.parent
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
ROWS = int(os.environ.get("BENCH_ROWS", "20000"))
BIG_ROWS = int(os.environ.get("BENCH_BIG_ROWS", "1000000"))
SOAK = int(os.environ.get("BENCH_SOAK", "100000"))
ONLY = os.environ.get("BENCH_ONLY", "")
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
WRK = ["wrk", "-t2", f"-c{CONNECTIONS}", "--latency", "--timeout", "10s"]

KEY_READ = "/rest/v1/items?id=eq.4242"
LIST_READ = "/rest/v1/items?location=like.*lo*&id=gt.100&order=name&limit=50"
EMBED_READ = "/rest/v1/items?select=id,name,owner:owners(name),tags(label)&id=lte.50&order=id"
PLAIN_50 = "/rest/v1/items?select=id,name&id=lte.50&order=id"
INDEXED = "/rest/v1/items?name=gte.item%205&order=name&limit=50"

POST_SCRIPT = """
wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["apikey"] = "%s"
"""


# --- measuring


class Results:
    """wrk's figures per label, and the total of requests each server answered."""

    def __init__(self):
        self.rates = {}
        self.p99 = {}
        self.served = {}
        self.cpu = {}  # CPU milliseconds a request, where measured (tools/bench_php.py)

    def wrk(self, label, url, headers=None, script=None, seconds=SECONDS, server=None):
        command = [*WRK, f"-d{seconds:g}s"]
        for name, value in (headers or {}).items():
            command += ["-H", f"{name}: {value}"]
        if script is not None:
            command += ["-s", script]
        output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
        total = int(re.search(r"(\d+) requests in", output).group(1))
        p99 = _milliseconds(re.search(r"99%\s+([\d.]+\w+)", output).group(1))
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
        self.rates[label], self.p99[label] = rate, p99
        self.served[server] = self.served.get(server, 0) + total
        note = f"   non-2xx {errors.group(1)}" if errors else ""
        print(f"  {label:<46} {rate:8.0f} req/s   p99 {p99:7.1f} ms{note}", flush=True)
        return rate


def _milliseconds(text):
    number, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def bcrypt_bound(rounds=10, seconds=3.0):
    """Password checks per second bcrypt allows on this machine: one thread per core."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds))
    counts = []

    def check():
        done, stop_at = 0, time.monotonic() + seconds
        while time.monotonic() < stop_at:
            bcrypt.checkpw(PASSWORD.encode(), hashed)
            done += 1
        counts.append(done)

    threads = [threading.Thread(target=check) for _ in range(os.cpu_count() or 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def query_plan(url, path):
    """The SQL minibase runs for `path`, and the database's plan for it."""
    from app import create_app
    from database import statements
    from extensions import db

    workdir = Path(tempfile.mkdtemp(prefix="minibase-plan-"))
    (workdir / "tables.toml").write_text(TABLES_TOML)
    app = create_app(
        {"DATABASE_URL": url, "JWT_SECRET": SECRET, "TABLES_CONFIG": str(workdir / "tables.toml")}
    )
    seen = []
    run = statements.run_prepared

    def run_and_record(engine, values, *prepared, **options):  # prepared reads pass no SQLAlchemy event
        seen.extend((s.sql, statements.bound_parameters(s, values)) for s in prepared)
        return run(engine, values, *prepared, **options)

    with app.app_context():
        sa.event.listen(db.engine, "before_cursor_execute", lambda *a: seen.append((a[2], a[3])))
        statements.run_prepared = run_and_record
        try:
            app.test_client().get(path, headers={"apikey": tokens.api_key("anon", SECRET)})
        finally:
            statements.run_prepared = run
        reads = [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT") and "items" in s]
        statement, parameters = next((s, p) for s, p in reads if "count(" not in s.lower())
        explain = "EXPLAIN QUERY PLAN " if url.startswith("sqlite") else "EXPLAIN "
        with db.engine.connect() as connection:
            rows = connection.exec_driver_sql(explain + statement, parameters).all()
        db.engine.dispose()
    shutil.rmtree(workdir, ignore_errors=True)
    return " ".join(statement.split()), [" | ".join(str(v) for v in row) for row in rows]


# --- the run


def report(rows):
    print("\nThe goals, measured in this run")
    print(f"  {'figure':<58} {'value':>9} {'goal':>9}  met")
    for label, value, goal, met in rows:
        print(f"  {label:<58} {value:>9} {goal:>9}  {'-' if met is None else 'met' if met else 'NOT MET'}")


KEY = f"GET {KEY_READ}"
USER = "GET /auth/v1/user"
LIST = "GET filtered list, 50 rows"
PLAIN = "GET 50 rows, no embed"
EMBED = "GET 50 rows, a to-one and a to-many embed"
PEER_KEY = "datasette: one row by key"
PEER_LIST = "datasette: filtered list, 50 rows"
SIGN_IN = "POST /auth/v1/token (password, cost 10)"
BARE = "bound: Flask + one sqlite3 read by key"
BARE_MYSQL = "bound: Flask + one PyMySQL read by key"
FLOOR = "the bound's read behind minibase's gateway"
BARE_LIST = "Flask + the same 50-row list by sqlite3"
WORKERS_2 = f"{KEY} (WORKERS=2)"
CLOSED = f"{KEY} (WORKERS=2, a connection a request)"
MARIADB = " (MariaDB)"


def bench_reads(results, base, key, bearer, suffix=""):
    headers = {"apikey": key}
    results.wrk(KEY + suffix, base + KEY_READ, headers, server="minibase")
    results.wrk(USER + suffix, base + "/auth/v1/user", {**headers, "Authorization": f"Bearer {bearer}"},
                server="minibase")  # fmt: skip
    results.wrk(LIST + suffix, base + LIST_READ, headers, server="minibase")


def at_least(label, value, goal):
    return (label, f"{value:.2f}", f">= {goal}", value >= goal)


def main():
    if shutil.which("wrk") is None:
        raise SystemExit("make bench needs wrk: apt-get install wrk")
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-"))
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir()
    path, key, results, processes = workdir / "bench.db", tokens.api_key("anon", SECRET), Results(), []
    headers = {"apikey": key}
    try:
        if ONLY in ("mysql", "php"):
            report(bench_mariadb(workdir, results, key, path))
            return
        if ONLY == "storage":
            report(bench_storage(results, workdir))
            return
        print(f"seeding {ROWS} rows ...", flush=True)
        seed(f"sqlite:///{path}", ROWS)
        ceiling, ceiling_url = start_ceiling(path)
        minibase, base = start_minibase(workdir, f"sqlite:///{path}")
        floor, floor_url = start_minibase(workdir, f"sqlite:///{path}", command=("-c", FLOOR_APP, str(path)))
        peer, peer_url = start_datasette(path)
        processes += [ceiling, minibase, floor, peer]
        bearer = sign_up(base, key)
        print(f"\nSQLite, {ROWS} rows; wrk -t2 -c{CONNECTIONS}, {SECONDS:g} s a figure")
        results.wrk("ceiling: trivial Flask JSON endpoint", ceiling_url + "/", server="ceiling")
        results.wrk(BARE, ceiling_url + "/row/4242", server="ceiling")
        results.wrk(BARE_LIST, ceiling_url + "/list", server="ceiling")
        results.wrk(FLOOR, floor_url + "/rest/v1/__floor/4242", headers, server="floor")
        stop(floor)
        results.wrk("GET /health", base + "/health", server="minibase")
        bench_reads(results, base, key, bearer)
        results.wrk(PLAIN, base + PLAIN_50, headers, server="minibase")
        if requests.get(base + EMBED_READ, headers=headers, timeout=10).status_code == 200:
            results.wrk(EMBED, base + EMBED_READ, headers, server="minibase")
        if ONLY == "sqlite":
            report([*read_rows(results), *embed_rows(results)])
            return
        if peer is not None:
            results.wrk(PEER_KEY, peer_url + "/bench/items/4242.json?_shape=array", server="datasette")
            results.wrk(PEER_LIST, peer_url + "/bench/items.json?_shape=array&location__contains=lo"
                        "&id__gt=100&_sort=name&_size=50", server="datasette")  # fmt: skip
        script = workdir / "signin.lua"
        body = json.dumps({"email": "bench@example.com", "password": PASSWORD})
        script.write_text(POST_SCRIPT % (body, key))
        url = base + "/auth/v1/token?grant_type=password"
        signin = results.wrk(SIGN_IN, url, script=str(script), server="minibase")
        bound = bcrypt_bound()
        print(f"  {'bcrypt bound (checkpw at cost 10, a thread a core)':<46} {bound:8.1f} /s")
        while results.served.get("minibase", 0) < SOAK:
            results.wrk("soak: " + KEY, base + KEY_READ, headers, seconds=10, server="minibase")
        rss = rss_mb(minibase)
        stop(minibase)
        stop(peer)
        rss = max(rss, bench_workers(workdir, results, f"sqlite:///{path}", key))
        rows = sqlite_rows(results, signin / bound, rss, peer is not None)
        rows += bench_scale(workdir, results, key)
        rows += bench_policies(workdir, results, key)
        rows += bench_storage(results, workdir)
        rows += bench_mariadb(workdir, results, key, path)
        if peer is None:
            print("\n(datasette is not installed: `make bench` installs it into .venv-bench)")
        report(rows)
    finally:
        for process in processes:
            stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


def read_rows(results):
    rate = results.rates
    bound = rate[BARE]
    return [
        at_least(f"{FLOOR} / the bound", rate[FLOOR] / bound, 0.90),
        at_least("key read / the same bound", rate[KEY] / bound, 0.85),
        at_least(f"{USER} / the same bound", rate[USER] / bound, 0.85),
        (f"{BARE_LIST} / the bound (no goal)", f"{rate[BARE_LIST] / bound:.2f}", "-", None),
        at_least(f"{LIST} (ordered) / the same bound", rate[LIST] / bound, 0.50),
    ]


def sqlite_rows(results, signin, rss, peer):
    rate = results.rates
    p99 = max(results.p99[label] for label in (KEY, USER, LIST))
    closed = rate[CLOSED] / rate[WORKERS_2]  # no goal: what a client without keep-alive gets
    rows = [
        *read_rows(results),
        at_least("key read: WORKERS=2 / WORKERS=1", rate[WORKERS_2] / rate[KEY], 1.6),
        ("key read, WORKERS=2: a connection a request / kept open", f"{closed:.2f}", "-", None),
    ]
    if peer:
        rows.append(at_least("key read: minibase / datasette", rate[KEY] / rate[PEER_KEY], 2.5))
        rows.append(at_least("filtered list: minibase / datasette", rate[LIST] / rate[PEER_LIST], 2.5))
    rows.append(at_least("sign-in / bcrypt bound", signin, 0.90))
    rows.append(("p99 of the three reads at 16 connections, ms", f"{p99:.1f}", "< 50", p99 < 50))
    rows.append((f"RSS per process after {results.served['minibase']} requests, MB", f"{rss:.0f}",
                 "< 150", rss < 150))  # fmt: skip
    return rows + embed_rows(results)


def embed_rows(results):
    rate = results.rates
    if EMBED not in rate:
        return []
    cost = rate[PLAIN] / rate[EMBED]
    return [("embedded read's cost / plain read's", f"{cost:.2f}", "<= 2", cost <= 2)]


def bench_workers(workdir, results, url, key):
    """The key read with WORKERS=2; the largest RSS of its processes after it."""
    server, base = start_minibase(workdir, url, WORKERS=2)
    try:  # each worker reflects the table on its first read: warm both before measuring
        results.wrk("warm-up: " + WORKERS_2, base + KEY_READ, {"apikey": key}, seconds=2, server="workers")
        results.wrk(WORKERS_2, base + KEY_READ, {"apikey": key}, server="workers")
        # a client that opens a connection for each request (no keep-alive), as many scripts do
        results.wrk(CLOSED, base + KEY_READ, {"apikey": key, "Connection": "close"}, server="workers")
        return rss_mb(server)
    finally:
        stop(server)


def bench_scale(workdir, results, key):
    rates = {}
    for rows in (1000, BIG_ROWS):
        path = workdir / f"scale{rows}.db"
        print(f"\nseeding {rows} rows ...", flush=True)
        seed(f"sqlite:///{path}", rows)
        server, base = start_minibase(workdir, f"sqlite:///{path}")
        try:
            rates[rows] = results.wrk(f"GET {INDEXED} ({rows} rows)", base + INDEXED, {"apikey": key},
                                      server="scale")  # fmt: skip
        finally:
            stop(server)
        if rows == BIG_ROWS:
            statement, plan = query_plan(f"sqlite:///{path}", INDEXED)
            print(f"  SQL:  {statement}")
            for line in plan:
                print(f"  plan: {line}")
    cost = rates[1000] / rates[BIG_ROWS]
    return [(f"indexed filter: cost at {BIG_ROWS} rows / at 1000", f"{cost:.2f}x", "<= 1.5x", cost <= 1.5)]


POLICY = "GET 50 posts, the policy author_id = :uid"
EXPLICIT = "GET 50 posts, the filter author_id=eq.1"
MEMBERSHIP = "GET 50 projects, a membership policy (EXISTS)"


def bench_policies(workdir, results, key):
    """A read a row policy filters against the same read with the filter written out: the policy
    is in the SQL and the prepared plan, so it costs what the filter costs."""
    path = workdir / "policies.db"
    print(f"\nseeding {ROWS} posts and projects ...", flush=True)
    seed_policies(f"sqlite:///{path}", ROWS)
    policies = workdir / "policies"
    policies.mkdir()
    minibase, base = start_minibase(policies, f"sqlite:///{path}", POLICIES_TOML)
    try:
        headers = {"apikey": key, "Authorization": f"Bearer {sign_up(base, key)}"}  # user 1
        query = "?select=id,title&order=id&limit=50"
        results.wrk(POLICY, base + "/rest/v1/posts" + query, headers, server="policies")
        results.wrk(
            EXPLICIT, base + "/rest/v1/posts_open" + query + "&author_id=eq.1", headers, server="policies"
        )
        results.wrk(
            MEMBERSHIP,
            base + "/rest/v1/projects?select=id,name&order=id&limit=50",
            headers,
            server="policies",
        )
    finally:
        stop(minibase)
    cost = results.rates[EXPLICIT] / results.rates[POLICY]
    membership = results.rates[EXPLICIT] / results.rates[MEMBERSHIP]
    return [
        ("policy read's cost / the explicit filter's", f"{cost:.2f}", "<= 1.2", cost <= 1.2),
        ("membership policy's cost / the explicit filter's", f"{membership:.2f}", "(reported)", None),
    ]


def bench_mariadb(workdir, results, key, path):
    server, url = start_mariadb(workdir)
    if server is None:
        print("\n(MariaDB: mariadbd is not installed, or BENCH_MARIADB=off)")
        return []
    minibase = ceiling = None
    try:
        print(f"\nMariaDB, {ROWS} rows", flush=True)
        seed(url, ROWS)
        if ONLY == "php":
            return bench_php_crud_api(workdir, results, key, url, server)
        ceiling, ceiling_url = start_ceiling(path, url.replace("mysql+pymysql", "mysql"))
        bound = results.wrk(BARE_MYSQL, ceiling_url + "/mysql/4242", server="ceiling")
        minibase, base = start_minibase(workdir, url)
        bench_reads(results, base, key, sign_up(base, key), MARIADB)
        statement, plan = query_plan(url, LIST_READ)
        print(f"  SQL:  {statement}")
        for line in plan:
            print(f"  plan: {line}")
        stop(minibase)
        rate = results.rates
        rows = [
            at_least(f"MariaDB: key read / {BARE_MYSQL[7:]}", rate[KEY + MARIADB] / bound, 0.80),
            at_least(f"MariaDB: {USER} / the same bound", rate[USER + MARIADB] / bound, 0.60),
            at_least(f"MariaDB: {LIST} / the same bound", rate[LIST + MARIADB] / bound, 0.60),
        ]
        return rows + bench_php_crud_api(workdir, results, key, url, server)
    finally:
        stop(minibase)
        stop(ceiling)
        stop(server)


if __name__ == "__main__" and measures("bench"):
    main()
