"""Peak memory of minibase while it takes and serves one large object: a 200 MB upload and its
download, streamed through waitress, with the server's peak resident set (VmHWM) read before and
after each. `python tools/storage_memory.py [MB]`."""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from auth import tokens  # noqa: E402
from tools.servers import LOGS, ROOT, SECRET, free_port, spawn, stop, wait_until_up  # noqa: E402

CHUNK = 1024 * 1024


def peak_mb(process):
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(workdir, megabytes):
    """minibase with a bucket `big` for the service key, taking objects of up to `megabytes` MB."""
    (workdir / "tables.toml").write_text("[buckets.big]\n")
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir}/storage.db",
        "JWT_SECRET": SECRET,
        "RATE_LIMITS": "off",
        "PORT": str(port),
        "TABLES_CONFIG": str(workdir / "tables.toml"),
        "STORAGE_ROOT": str(workdir / "storage"),
        "STORAGE_FILE_SIZE_LIMIT": str((megabytes + 1) * CHUNK),  # in bytes: the body is MiB
    }
    process = spawn([sys.executable, "wsgi.py"], LOGS / "storage-memory.log", cwd=ROOT, env=env)
    return wait_until_up(process, f"http://127.0.0.1:{port}/health", "minibase"), f"http://127.0.0.1:{port}"


def body(megabytes):
    block = os.urandom(CHUNK)
    for _ in range(megabytes):
        yield block


def main(megabytes=200):
    LOGS.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="minibase-storage-"))
    process, base = start(workdir, megabytes)
    headers = {"apikey": tokens.api_key("service_role", SECRET), "Content-Type": "application/octet-stream"}
    url = f"{base}/storage/v1/object/big/large.bin"
    try:
        before = peak_mb(process)
        started = time.perf_counter()
        done = requests.post(url, data=body(megabytes), headers=headers, timeout=600)  # chunked: streamed
        took = time.perf_counter() - started
        assert done.status_code == 200, done.text
        after_upload = peak_mb(process)
        started = time.perf_counter()
        received = 0
        with requests.get(url, headers=headers, stream=True, timeout=600) as download:
            for chunk in download.iter_content(CHUNK):
                received += len(chunk)
        assert received == megabytes * CHUNK
        fetched = time.perf_counter() - started
        after_download = peak_mb(process)
    finally:
        stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{megabytes} MB upload: {took:.1f} s ({megabytes / took:.0f} MB/s); download {fetched:.1f} s")
    print(f"server peak RSS: {before:.0f} MB at start, {after_upload:.0f} MB after the upload, "
          f"{after_download:.0f} MB after the download")  # fmt: skip
    return before, after_upload, after_download


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
