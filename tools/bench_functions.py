"""make bench's Functions figures: a `hello` call's rate and p99 beside a /rest/v1 key read in the
same run and at the same concurrency (wrk -t2 -c4: a function's calls at once are bounded, and past
the bound refused, so a run at more connections would count refusals), the first call after a
change (a cold start: a new worker process imports the module), and the memory of the whole
service (its process and every worker) before any call and with the pool idle after them."""

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from auth import tokens  # noqa: E402
from tools.bench import KEY_READ, Results, at_least, report  # noqa: E402
from tools.servers import LOGS, ROOT, SECRET, measures, seed, start_minibase, stop  # noqa: E402

WRK_CONNECTIONS = ["wrk", "-t2", "-c4", "--latency", "--timeout", "10s"]
COLD_STARTS = 10
HELLO = "GET /functions/v1/hello"
KEY = f"GET {KEY_READ}"


def service_rss_mb(process):
    """The resident memory of the process and all its descendants (the function workers), MB."""
    total, pending = 0, [process.pid]
    while pending:
        pid = pending.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
        total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return total / 1024


def cold_starts(base, headers, module):
    """Milliseconds of the first call after each of COLD_STARTS changes of the module."""
    seconds = []
    for n in range(COLD_STARTS):
        later = time.time_ns() + (n + 1) * 10**9
        os.utime(module, ns=(later, later))
        started = time.perf_counter()
        answer = requests.get(base + "/functions/v1/hello", headers=headers, timeout=30)
        assert answer.text == "Hello World", (answer.status_code, answer.headers, answer.text[:500])
        seconds.append(time.perf_counter() - started)
    return [1000 * s for s in seconds]


def main():
    import tools.bench as bench

    bench.WRK = WRK_CONNECTIONS
    workdir = Path(tempfile.mkdtemp(prefix="minibase-bench-functions-"))
    LOGS.mkdir(exist_ok=True)
    functions = workdir / "functions"
    functions.mkdir()
    shutil.copy(ROOT / "tests" / "edge" / "functions" / "hello.py", functions / "hello.py")
    url = f"sqlite:///{workdir / 'bench.db'}"
    seed(url, 10000)
    key = tokens.api_key("anon", SECRET)
    headers = {"apikey": key, "Authorization": f"Bearer {key}"}
    minibase, base = start_minibase(workdir, url, FUNCTIONS_DIR=functions, FUNCTIONS_CONCURRENCY=8)
    try:
        before = service_rss_mb(minibase)
        results = Results()
        print(
            f"\nFunctions; wrk -t2 -c4, {bench.SECONDS:g} s a figure; load average {os.getloadavg()[0]:.1f}"
        )
        results.wrk(KEY, base + KEY_READ, {"apikey": key}, server="minibase")
        results.wrk(HELLO, base + "/functions/v1/hello", headers, server="minibase")
        cold = cold_starts(base, headers, functions / "hello.py")
        warm = []
        for _ in range(COLD_STARTS):
            started = time.perf_counter()
            requests.get(base + "/functions/v1/hello", headers=headers, timeout=30)
            warm.append(1000 * (time.perf_counter() - started))
        time.sleep(1)
        idle = service_rss_mb(minibase)
        cold_ms, warm_ms = statistics.median(cold), statistics.median(warm)
        print(f"  cold start (first call after a change), median of {COLD_STARTS}: {cold_ms:.0f} ms; "
              f"a warm call: {warm_ms:.1f} ms")  # fmt: skip
        print(f"  the service's memory: {before:.0f} MB before any call, {idle:.0f} MB with the pool idle")
        rate = results.rates
        return [
            at_least("hello call / key read (same run, -c4)", rate[HELLO] / rate[KEY], 0.5),
            ("p99 of a hello call at 4 connections, ms", f"{results.p99[HELLO]:.1f}", "-", None),
            ("cold start, median ms", f"{statistics.median(cold):.0f}", "-", None),
            ("service + idle workers, MB", f"{idle:.0f}", "< 150", idle < 150),
        ]
    finally:
        stop(minibase)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__" and measures("bench_functions"):
    report(main())
