"""`make bench`: throughput and latency of the hot endpoints against a real waitress server.

The server runs in its own process on a scratch SQLite database (or BENCH_DATABASE_URL), rate
limits off, at the default bcrypt cost; the clients are threads in this process, on the same
machine, so the figures are a floor, not a ceiling.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine, insert

import tokens

ROOT = Path(__file__).resolve().parent
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
ROWS = int(os.environ.get("BENCH_ROWS", "20000"))
SECRET = "bench-secret-" + "b" * 60


def seed_items(url):
    engine = create_engine(url)
    items = Table(
        "items",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("name", String(64), nullable=False),
        Column("price", Float),
        Column("user_id", Integer),
    )
    items.drop(engine, checkfirst=True)
    items.create(engine)
    with engine.begin() as connection:
        rows = [{"name": f"item {n}", "price": n % 997 / 10, "user_id": n % 50} for n in range(ROWS)]
        for start in range(0, ROWS, 5000):
            connection.execute(insert(items), rows[start : start + 5000])
    engine.dispose()


def start_server(workdir, url, port):
    (workdir / "tables.toml").write_text('[tables.items]\nselect = "anon"\n')
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JWT_SECRET": SECRET,
        "RATE_LIMITS": "off",
        "PORT": str(port),
        "TABLES_CONFIG": str(workdir / "tables.toml"),
    }
    server = subprocess.Popen(
        [sys.executable, "wsgi.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                return server
        except requests.ConnectionError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"server did not start: {server.stderr.read().decode()[-2000:]}")


def measure(name, make_request, expect=200):
    """Run `make_request(session)` from CLIENTS threads for SECONDS; print req/s and latencies."""
    latencies, failures = [], []
    stop = time.monotonic() + SECONDS

    def client():
        session = requests.Session()
        while time.monotonic() < stop:
            began = time.perf_counter()
            response = make_request(session)
            latencies.append(time.perf_counter() - began)
            if response.status_code != expect:
                failures.append(response.status_code)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ms = sorted(latency * 1000 for latency in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{name:<38} {len(ms) / SECONDS:8.0f} req/s   p50 {statistics.median(ms):6.1f} ms"
        f"   p99 {p99:6.1f} ms   errors {len(failures)}"
    )


def main():
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-"))
    url = os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{workdir}/bench.db"
    seed_items(url)
    port = 18000 + os.getpid() % 1000
    server = start_server(workdir, url, port)
    base = f"http://127.0.0.1:{port}"
    key = tokens.api_key("anon", SECRET)
    headers = {"apikey": key}
    try:
        credentials = {"email": "bench@example.com", "password": "bench-password"}
        session = requests.post(f"{base}/auth/v1/signup", json=credentials, headers=headers).json()
        bearer = {**headers, "Authorization": f"Bearer {session['access_token']}"}
        print(f"{CLIENTS} client threads, {SECONDS:.0f} s each, {ROWS} rows in items, {url.split(':')[0]}")
        measure("GET /health", lambda s: s.get(f"{base}/health"))
        measure(
            "POST /auth/v1/token (password)",
            lambda s: s.post(f"{base}/auth/v1/token?grant_type=password", json=credentials, headers=headers),
        )
        for label, body in (
            ("POST /auth/v1/token wrong password", {**credentials, "password": "wrong-password"}),
            ("POST /auth/v1/token unknown email", {**credentials, "email": "nobody@example.com"}),
        ):
            measure(
                label,
                lambda s, body=body: s.post(
                    f"{base}/auth/v1/token?grant_type=password", json=body, headers=headers
                ),
                expect=400,
            )
        measure("GET /auth/v1/user", lambda s: s.get(f"{base}/auth/v1/user", headers=bearer))
        measure(
            "GET /rest/v1/items?id=eq.N", lambda s: s.get(f"{base}/rest/v1/items?id=eq.4242", headers=headers)
        )
        measure(
            "GET /rest/v1/items filtered, 50",
            lambda s: s.get(
                f"{base}/rest/v1/items?price=gt.50&name=like.*9*&order=price.desc&limit=50", headers=headers
            ),
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
