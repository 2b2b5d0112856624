"""Storage's figures for `make bench`: a 1 MB object downloaded from minibase (authenticated, and
by its public URL) against the ceiling, a bare Flask + waitress app sending the same file with
send_file; and upload throughput, 1 MB objects one after another and one 64 MB object."""

import sys
import time
from pathlib import Path

import requests

from auth import tokens
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
        top = results.wrk(CEILING, f"http://127.0.0.1:{port}/file", server="ceiling")
        got = results.wrk(DOWNLOAD, f"{base}/storage/v1/object/big/one.bin", service, server="storage")
        public = results.wrk(PUBLIC, f"{base}/storage/v1/object/public/pub/one.bin", server="storage")
        small = upload_rate(base, upload, payload, count=40)
        large = upload_rate(base, upload, bytes(64 * MB), count=1)
    finally:
        stop(minibase)
        stop(ceiling)
    return [
        (f"{DOWNLOAD}, req/s", f"{got:.0f}", "-", None),
        (f"{DOWNLOAD}, MB/s", f"{got:.0f}", "-", None),
        (f"{PUBLIC}, MB/s", f"{public:.0f}", "-", None),
        (f"{CEILING}, MB/s", f"{top:.0f}", "(a bound)", None),
        ("authenticated download / ceiling", f"{got / top:.2f}", ">= 0.50", got / top >= 0.5),
        ("upload of 1 MB objects, one at a time, MB/s", f"{small:.0f}", "-", None),
        ("upload of one 64 MB object, MB/s", f"{large:.0f}", "-", None),
    ]


def upload_rate(base, headers, payload, count):
    """MB/s of `count` uploads of `payload`, one after another (each replacing the last)."""
    started = time.perf_counter()
    with requests.Session() as session:
        for _ in range(count):
            done = session.post(f"{base}/storage/v1/object/big/up.bin", data=payload,
                                headers={**headers, "x-upsert": "true"}, timeout=120)  # fmt: skip
            done.raise_for_status()
    return count * len(payload) / MB / (time.perf_counter() - started)
