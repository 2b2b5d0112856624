"""Profile the hot reads in-process: GET /rest/v1/items?id=eq.N and GET /auth/v1/user, through the
WSGI app (no server, no socket), under cProfile; prints the mean per request and the top entries.

    .venv/bin/python tools/profile_reads.py [requests] [--no-profile]
    .venv/bin/python tools/profile_reads.py --compare

--compare measures, without a profiler, the CPU a request takes of make bench's bound (a bare
Flask app and one sqlite3 read by key), of the same read behind minibase's gateway, of the key
read (the same id each time, as wrk sends it), GET /auth/v1/user and the 50-row reads with and
without embeds, in interleaved rounds, and prints each one's median and its cost over the bound:
what the server adds is left out, so these differences are what the app's own work costs.

PROFILE_DATABASE_URL (a mysql+pymysql:// URL, say) profiles on that database instead of a new
SQLite file; its bench tables are created and seeded again.
"""

import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from auth import tokens  # noqa: E402
from tools import bench, servers  # noqa: E402

COUNT = int(next((a for a in sys.argv[1:] if a.isdigit()), "3000"))
PROFILE = "--no-profile" not in sys.argv
ROUNDS = 9  # of --compare, each of COUNT // 4 requests a case


def environ(path, headers):
    path, _, query = path.partition("?")
    base = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "wrk",
    }
    for name, value in headers.items():
        base["HTTP_" + name.upper().replace("-", "_")] = value
    return base


def run(app, base, count, vary=True):
    statuses = set()

    def start_response(status, headers, exc_info=None):
        statuses.add(status)

    for n in range(count):
        env = dict(base)
        env["wsgi.input"] = io.BytesIO(b"")
        if vary and "id=eq." in env["QUERY_STRING"]:
            env["QUERY_STRING"] = f"id=eq.{n % 20000 + 1}"
        body = app(env, start_response)
        b"".join(body)
        getattr(body, "close", lambda: None)()
    return statuses


def bench_app(rows, **settings):
    """The service over the bench tables with `rows` items in a new SQLite file, logging at INFO to
    a stream nobody reads (as the server logs), and its anon key."""
    workdir = Path(tempfile.mkdtemp(prefix="minibase-profile-"))
    (workdir / "tables.toml").write_text(servers.TABLES_TOML)
    url = os.environ.get("PROFILE_DATABASE_URL") or f"sqlite:///{workdir / 'bench.db'}"
    servers.seed(url, rows)
    logging.basicConfig(level=logging.INFO, stream=open("/dev/null", "w"))  # noqa: SIM115
    app = create_app(
        {"DATABASE_URL": url, "JWT_SECRET": servers.SECRET, "RATE_LIMITS": False,
         "TABLES_CONFIG": str(workdir / "tables.toml"), "MAILER_AUTOCONFIRM": True, **settings}
    )  # fmt: skip
    return app, tokens.api_key("anon", servers.SECRET)


def bound_app(app):
    """make bench's bound (servers.CEILING_APP's /row/<key>) as an app of this process, over the
    SQLite file of `app`, and the same read added to `app` behind its gateway (servers.FLOOR_APP's
    route); before `app` serves its first request."""
    import sqlite3
    import threading

    from flask import Flask

    path = app.config["DATABASE_URL"].removeprefix("sqlite:///")
    local, bound = threading.local(), Flask("bound")
    columns = ("id", "name", "location", "price", "owner_id")
    statement = "SELECT id, name, location, price, owner_id FROM items WHERE id = ?"

    @bound.get("/row/<int:key>")
    def row(key):
        if not hasattr(local, "db"):
            local.db = sqlite3.connect(path)
        return [dict(zip(columns, r, strict=True)) for r in local.db.execute(statement, (key,)).fetchall()]

    app.add_url_rule("/rest/v1/__floor/<int:key>", "floor", row)
    return bound


def compare(app, key, bearer, bound):
    """--compare: each case's median CPU a request, and what it costs over the bound."""
    from runtime import logs

    writer = logs.log_in_batches()  # as the server logs: the request line is part of the cost
    cases = {
        "bound": (bound, environ("/row/4242", {})),
        "the bound's read behind the gateway": (app, environ("/rest/v1/__floor/4242", {"apikey": key})),
        "key read": (app, environ(bench.KEY_READ, {"apikey": key})),
        "/auth/v1/user": (
            app,
            environ("/auth/v1/user", {"apikey": key, "Authorization": f"Bearer {bearer}"}),
        ),
        "50 rows": (app, environ(bench.PLAIN_50, {"apikey": key})),
        "50 rows, embeds": (app, environ(bench.EMBED_READ, {"apikey": key})),
    }
    count, took = max(COUNT // 4, 100), {label: [] for label in cases}
    for label, (served, base) in cases.items():
        print(f"{label}: {run(served, base, 100, vary=False)}")
    for _ in range(ROUNDS):
        for label, (served, base) in cases.items():
            started = time.process_time()  # the process's CPU: the log writer's thread counts too
            run(served, base, count, vary=False)
            took[label].append((time.process_time() - started) / count * 1e6)
    writer.stop()
    floor = statistics.median(took["bound"])
    print(f"\n{ROUNDS} interleaved rounds of {count} requests a case; CPU a request, median")
    for label, times in took.items():
        middle = statistics.median(times)
        print(f"  {label:<38} {middle:7.1f} us   over the bound {middle - floor:7.1f} us")


def main():
    app, key = bench_app(20000)
    bound = bound_app(app) if "--compare" in sys.argv else None
    client = app.test_client()
    body = {"email": "bench@example.com", "password": servers.PASSWORD}
    signed = client.post("/auth/v1/signup", json=body, headers={"apikey": key}).get_json()
    if "access_token" not in signed:  # a database profiled before has the user
        url = "/auth/v1/token?grant_type=password"
        signed = client.post(url, json=body, headers={"apikey": key}).get_json()
    bearer = signed["access_token"]
    if "--compare" in sys.argv:
        compare(app, key, bearer, bound)
        return
    cases = {
        "key read": environ(bench.KEY_READ, {"apikey": key}),
        "/auth/v1/user": environ("/auth/v1/user", {"apikey": key, "Authorization": f"Bearer {bearer}"}),
    }
    for label, base in cases.items():
        run(app, base, 200)  # warm up
        started = time.perf_counter()
        statuses = run(app, base, COUNT)
        took = (time.perf_counter() - started) / COUNT * 1000
        print(f"{label}: {took:.3f} ms a request, no profiler ({statuses})")
    if not PROFILE:
        return
    for label, base in cases.items():
        profiler = cProfile.Profile()
        profiler.enable()
        run(app, base, COUNT)
        profiler.disable()
        for order in ("cumulative", "tottime"):
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order)
            stats.print_stats(20)
            text = out.getvalue()
            print(f"\n===== {label}: {COUNT} requests, by {order}")
            print(text[text.index("   ncalls") :].rstrip())


if __name__ == "__main__":
    main()
