"""`make bench`'s webhook figures: the latency from a row committed with plain SQL to its delivery
at a receiver (p50, p99, one change every 50 ms), and how many deliveries a second one hook sends
to one fast receiver (a thousand rows committed at once). minibase runs as `python wsgi.py` over
SQLite (REALTIME=off, WEBHOOK_POLL_SECONDS=0.05); the receiver is an http.server in this process,
which verifies nothing (its work is not the figure). Environment: BENCH_WEBHOOK_CHANGES (200),
BENCH_WEBHOOK_BURST (1000)."""

import base64
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.servers import measures, start_minibase, stop  # noqa: E402

CHANGES = int(os.environ.get("BENCH_WEBHOOK_CHANGES", "200"))
BURST = int(os.environ.get("BENCH_WEBHOOK_BURST", "1000"))
PAUSE = 0.05
HOOK_SECRET = "whsec_" + base64.b64encode(b"b" * 32).decode()


class Receiver:
    """Arrival times by webhook-id."""

    def __init__(self):
        self.arrived = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.arrived.setdefault(self.headers["webhook-id"], time.time())
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, count, seconds=120):
        deadline = time.monotonic() + seconds
        while len(self.arrived) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.arrived) >= count


def main():
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-webhooks-"))
    url = f"sqlite:///{workdir}/bench.db"
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT)")
    receiver = Receiver()
    tables = f'[webhooks.out]\ntable = "orders"\nurl = "{receiver.url}"\nsecret = "{HOOK_SECRET}"\n'
    process, _ = start_minibase(workdir, url, tables, REALTIME="off", WEBHOOK_POLL_SECONDS="0.05")
    try:
        time.sleep(2)  # the hook's thread makes the triggers
        committed = {}
        with engine.connect() as connection:
            for n in range(CHANGES):
                with connection.begin():
                    id_ = connection.exec_driver_sql(f"INSERT INTO orders (item) VALUES ('i{n}')").lastrowid
                committed[f"out_{id_}"] = time.time()
                time.sleep(PAUSE)
        if not receiver.wait_for(CHANGES):
            raise SystemExit(f"only {len(receiver.arrived)} of {CHANGES} changes arrived")
        latencies = sorted((receiver.arrived[key] - at) * 1000 for key, at in committed.items())
        p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
        before = len(receiver.arrived)
        with engine.begin() as connection:
            for n in range(BURST):
                connection.exec_driver_sql(f"INSERT INTO orders (item) VALUES ('b{n}')")
        started = time.time()
        if not receiver.wait_for(before + BURST, 300):
            raise SystemExit(f"only {len(receiver.arrived) - before} of {BURST} burst changes arrived")
        rate = BURST / (max(receiver.arrived.values()) - started)
        load = os.getloadavg()[0]
        print(f"\nWebhooks (SQLite, one hook, one receiver; load average {load:.1f})")
        print(f"  commit -> receiver latency: p50 {p50:.0f} ms, p99 {p99:.0f} ms ({CHANGES} changes)")
        print(f"  deliveries a second to one fast receiver: {rate:.0f} ({BURST} committed at once)")
    finally:
        stop(process)
        receiver.httpd.shutdown()
        engine.dispose()


if __name__ == "__main__" and measures("bench_webhooks"):
    main()
