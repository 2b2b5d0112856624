"""Storage's figures for `make bench`: a 1 MB object downloaded from minibase (authenticated, and
by its public URL) against the ceiling, a bare Flask + waitress app sending the same file with
send_file; and upload throughput, 1 MB objects one after another and one 64 MB object, against the
disk's: the same bytes written to files in the same directory and flushed to the disk (fsync), as
an upload must be before it is acknowledged."""

import os
import statistics
import sys
import time
from pathlib import Path

import requests

from auth import tokens
from tools.bench_php import cpu_seconds
from tools.servers import LOGS, SECRET, free_port, spawn, stop, wait_until_up
from tools.storage_memory import start

MB = 1024 * 1024
CEILING_FILE_APP = """
import sys
from flask import Flask, send_file
from waitress import serve
app = Flask("ceiling")
@app.get("/file")
def file():  # the least a download can do: the file, conditional, through waitress's file_wrapper
    return send_file(sys.argv[3], mimetype="application/octet-stream", conditional=True)
serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=int(sys.argv[2]), _quiet=True)
"""
DOWNLOAD = "GET a 1 MB object (authenticated)"
PUBLIC = "GET a 1 MB object (public URL)"
CEILING = "ceiling: Flask send_file of the same 1 MB"
ROUNDS = 3  # of the three downloads, in turns; the ratios are the rounds' medians


def bench_storage(results, workdir):
    """The storage rows of the report; `results` is bench.Results (it runs wrk)."""
    workdir = Path(workdir) / "storage-bench"
    workdir.mkdir()
    minibase, base = start(workdir, 64)
    ceiling = None
    service = {"apikey": tokens.api_key("service_role", SECRET)}
    try:
        requests.post(
            f"{base}/storage/v1/bucket", json={"id": "pub", "public": True}, headers=service, timeout=10
        )
        payload = bytes(range(256)) * (MB // 256)
        (workdir / "one.bin").write_bytes(payload)
        upload = {**service, "Content-Type": "application/octet-stream"}
        for bucket in ("big", "pub"):
            done = requests.post(
                f"{base}/storage/v1/object/{bucket}/one.bin", data=payload, headers=upload, timeout=30
            )
            done.raise_for_status()
        port = free_port()
        ceiling = spawn([sys.executable, "-c", CEILING_FILE_APP, str(port), "8", str(workdir / "one.bin")],
                        LOGS / "ceiling-file.log")  # fmt: skip
        wait_until_up(ceiling, f"http://127.0.0.1:{port}/file", "the file ceiling")
        ratios = []
        for _ in range(ROUNDS):  # in turns: each ratio is to the ceiling measured beside it
            top = results.wrk(CEILING, f"http://127.0.0.1:{port}/file", server="ceiling")
            got = results.wrk(DOWNLOAD, f"{base}/storage/v1/object/big/one.bin", service, server="storage")
            public = results.wrk(PUBLIC, f"{base}/storage/v1/object/public/pub/one.bin", server="storage")
            ratios.append((got / top, public / top))
        got_ratio, public_ratio = (statistics.median(column) for column in zip(*ratios, strict=True))
        large_payload = bytes(64 * MB)
        disk = workdir / "storage" / "disk-ceiling"
        cpu = {}  # label -> the server's CPU seconds per upload, each round's
        small, small_disk = interleaved(lambda: upload_rate(base, upload, payload, 40, minibase, cpu),
                                        lambda: disk_rate(disk, payload, count=40))  # fmt: skip
        large, large_disk = interleaved(lambda: upload_rate(base, upload, large_payload, 1, minibase, cpu),
                                        lambda: disk_rate(disk, large_payload, count=1))  # fmt: skip
    finally:
        stop(minibase)
        stop(ceiling)
    rows = (("1 MB objects, one at a time", small, small_disk, len(payload)),
            ("one 64 MB object", large, large_disk, len(large_payload)))  # fmt: skip
    for label, rate, bound, size in rows:
        spent = min(cpu[size]) * 1000
        print(f"  upload of {label:<35} {rate:8.0f} MB/s   the disk: {bound:.0f} MB/s   "
              f"server CPU {spent:.1f} ms an upload (least of the rounds)")  # fmt: skip
    return [
        (f"{DOWNLOAD}, MB/s (last round)", f"{got:.0f}", "-", None),
        (f"{PUBLIC}, MB/s (last round)", f"{public:.0f}", "-", None),
        (f"{CEILING}, MB/s (last round)", f"{top:.0f}", "(a bound)", None),
        at_least("authenticated 1 MB download / the send_file ceiling", got_ratio, 0.80),
        at_least("public 1 MB download / the send_file ceiling", public_ratio, 0.85),
        at_least("upload of 1 MB objects, one at a time / the disk", small / small_disk, 0.90),
        at_least("upload of one 64 MB object / the disk", large / large_disk, 0.90),
    ]


def at_least(label, value, goal):
    return (label, f"{value:.2f}", f">= {goal:.2f}", value >= goal)


def interleaved(measure, bound, rounds=3):
    """(best of `measure`, best of `bound`), taken in turns: the disk is shared with whatever else
    the machine does, and a figure and its bound taken minutes apart are not comparable."""
    figures, bounds = [], []
    for _ in range(rounds):
        bounds.append(bound())
        figures.append(measure())
    return max(figures), max(bounds)


def disk_rate(directory, payload, count):
    """MB/s of `count` files of `payload` written one after another into `directory`, each flushed to
    the disk before the next: what an upload does with its bytes and nothing else."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for n in range(count):
        with open(directory / f"{n}.bin", "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
    took = time.perf_counter() - started
    for n in range(count):
        (directory / f"{n}.bin").unlink()
    return count * len(payload) / MB / took


def upload_rate(base, headers, payload, count, server=None, cpu=None):
    """MB/s of `count` uploads of `payload`, one after another (each replacing the last); with the
    `server`'s process, the CPU seconds it spent per upload (from /proc) added to cpu[len(payload)]."""
    spent = cpu_seconds([server.pid]) if server is not None else 0
    started = time.perf_counter()
    with requests.Session() as session:
        for _ in range(count):
            done = session.post(f"{base}/storage/v1/object/big/up.bin", data=payload,
                                headers={**headers, "x-upsert": "true"}, timeout=120)  # fmt: skip
            done.raise_for_status()
    took = time.perf_counter() - started
    if server is not None:
        cpu.setdefault(len(payload), []).append((cpu_seconds([server.pid]) - spent) / count)
    return count * len(payload) / MB / took
