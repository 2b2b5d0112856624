"""Profile the single-row insert in-process: POST /rest/v1/items with one object, as supabase-js
sends it (no Prefer: 201, no body), through the WSGI app (no server, no socket). Prints the
statements one insert sends to the database, the mean per request, and cProfile's top entries.

    .venv/bin/python tools/profile_writes.py [requests] [--no-profile] [NAME ...]
    .venv/bin/python tools/profile_writes.py --compare [requests]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*fsum*' \
        .venv/bin/python tools/profile_writes.py --count insert|list [requests]

NAME: a function whose callees (^NAME: and callers) are printed too. --compare measures, without a
profiler, the CPU a request takes of the insert and of make bench's list beside php-crud-api
(`location=like.*lo*&id=gt.100&order=name&limit=50`) in interleaved rounds, and prints each one's
median. --count runs the requests of one case, after a warm-up, inside math.fsum, so that
callgrind counts the instructions of those requests only (its "Collected" line, divided by the
requests): a figure that does not move with the machine's load, as CPU time does on a shared one.

PROFILE_DATABASE_URL (a mysql+pymysql:// URL, say) profiles on that database instead of a new
SQLite file; its bench tables are created and seeded again.
"""

import cProfile
import io
import json
import math
import pstats
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from database import statements  # noqa: E402
from extensions import db  # noqa: E402
from tools import servers  # noqa: E402
from tools.bench_php import LIST_QUERY  # noqa: E402
from tools.profile_reads import bench_app, environ  # noqa: E402

COUNT = int(next((a for a in sys.argv[1:] if a.isdigit()), "2000"))
PROFILE = "--no-profile" not in sys.argv
ROUNDS = 9  # of --compare, each of COUNT // 4 requests a case
BODY = json.dumps({"name": "new item", "location": "Oslo", "price": 1.5, "owner_id": 7}).encode()
TABLES_TOML = servers.TABLES_TOML.replace(
    '[tables.items]\nselect = "anon"', '[tables.items]\nselect = "anon"\ninsert = "anon"'
)


def run(app, base, count):
    statuses = set()

    def start_response(status, headers, exc_info=None):
        statuses.add(status)

    body = BODY if base["REQUEST_METHOD"] == "POST" else b""
    for _ in range(count):
        env = dict(base)
        env["wsgi.input"] = io.BytesIO(body)
        answer = app(env, start_response)
        b"".join(answer)
        getattr(answer, "close", lambda: None)()
    return statuses


def compare(app, cases):
    """--compare: each case's median CPU a request, in interleaved rounds, as the server logs."""
    from runtime import logs

    writer = logs.log_in_batches()
    count, took = max(COUNT // 4, 100), {label: [] for label in cases}
    for label, base in cases.items():
        print(f"{label}: {run(app, base, 100)}")
    for _ in range(ROUNDS):
        for label, base in cases.items():
            started = time.process_time()  # the process's CPU: the log writer's thread counts too
            run(app, base, count)
            took[label].append((time.process_time() - started) / count * 1e6)
    writer.stop()
    print(f"\n{ROUNDS} interleaved rounds of {count} requests a case; CPU a request, median")
    for label, times in took.items():
        print(f"  {label:<10} {statistics.median(times):7.1f} us")


def count(app, base):
    """--count: the requests of one case, after a warm-up, inside math.fsum (callgrind's toggle)."""
    run(app, base, 100)

    def one():
        run(app, base, 1)
        return 0.0

    math.fsum(one() for _ in range(COUNT))
    print(f"{COUNT} requests inside math.fsum: divide callgrind's Collected by {COUNT}")


def main():
    servers.TABLES_TOML = TABLES_TOML
    app, key = bench_app(1000 if "--count" not in sys.argv and "--compare" not in sys.argv else 20000)
    base = environ("/rest/v1/items", {"apikey": key, "Content-Type": "application/json"})
    base.update(REQUEST_METHOD="POST", CONTENT_LENGTH=str(len(BODY)))
    cases = {"insert": base, "list": environ("/rest/v1/items?" + LIST_QUERY, {"apikey": key})}
    if "--compare" in sys.argv:
        compare(app, cases)
        return
    if "--count" in sys.argv:
        count(app, cases[sys.argv[sys.argv.index("--count") + 1]])
        return
    run(app, base, 200)  # warm up: the table reflected, the plans made
    seen = []
    with app.app_context():
        engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", lambda *a: seen.append(" ".join(a[2].split())))
    sa.event.listen(engine, "begin", lambda *a: seen.append("BEGIN (implicit)"))
    sa.event.listen(engine, "commit", lambda *a: seen.append("COMMIT"))
    sa.event.listen(engine, "rollback", lambda *a: seen.append("ROLLBACK"))
    execute = statements.execute

    def execute_and_record(statement, values, **options):  # a prepared write passes no SQLAlchemy event
        seen.append(
            " ".join(statement.sql.split())
            + (" (alone: autocommit on MySQL)" if options.get("alone") else "")
        )
        return execute(statement, values, **options)

    statements.execute = execute_and_record
    try:
        print(f"one insert ({run(app, base, 1)}), {engine.dialect.name}:")
    finally:
        statements.execute = execute
    for statement in seen:
        print(f"  {statement}")
    started, cpu = time.perf_counter(), time.process_time()
    statuses = run(app, base, COUNT)
    took = (time.perf_counter() - started) / COUNT * 1000
    cpu = (time.process_time() - cpu) / COUNT * 1000
    print(f"insert: {took:.3f} ms a request, {cpu:.3f} ms of it this process's CPU, no profiler ({statuses})")
    if not PROFILE:
        return
    profiler = cProfile.Profile(time.process_time)  # CPU time: waits on the database do not count
    profiler.enable()
    run(app, base, COUNT)
    profiler.disable()
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(30)
        text = out.getvalue()
        print(f"\n===== insert: {COUNT} requests, by {order}")
        print(text[text.index("   ncalls") :].rstrip())
    for name in sys.argv[1:]:
        if not name.isdigit() and not name.startswith("--") and name not in cases:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_callees(
                name.lstrip("^")
            )
            if name.startswith("^"):
                pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_callers(
                    name[1:]
                )
            print(out.getvalue())


if __name__ == "__main__":
    main()
