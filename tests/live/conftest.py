"""Realtime's tests run `python wsgi.py` itself (uvicorn, the socket and the HTTP API on one port)
over a real SQLite file or a real MariaDB database, and talk to it over real sockets."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from auth import tokens
from support import SECRET, eventually, free_port

ROOT = Path(__file__).resolve().parent.parent.parent


RUN_WSGI_PY = "import runpy; runpy.run_path('wsgi.py', run_name='__main__')"


class Server:
    """A running `python wsgi.py`: its process, URL, socket URL, keys and log."""

    def __init__(self, process, port, log_path):
        self.process, self.port, self.log_path = process, port, log_path
        self.base = f"http://127.0.0.1:{port}"
        self.anon = tokens.api_key("anon", SECRET)
        self.service = tokens.api_key("service_role", SECRET)

    def socket_url(self, key=None, vsn="1.0.0"):
        key = self.anon if key is None else key
        return f"ws://127.0.0.1:{self.port}/realtime/v1/websocket?apikey={key}&vsn={vsn}"

    def log(self):
        return self.log_path.read_text()

    def wait_for_log(self, *texts, timeout=10):
        """The log once it holds every one of `texts`: the service writes its log on a thread of
        its own, so a line can land after the request that caused it was answered."""
        return eventually(
            lambda: all(text in (log := self.log()) for text in texts) and log, timeout, 0.05, texts
        )


@pytest.fixture
def start_server(tmp_path, database_url, lay_migrated):
    """Start `python wsgi.py` on the test database with `tables` (tables.toml text) and `settings`;
    the database holds the service's migrated tables (tests/conftest.py, lay_migrated). `prelude`:
    Python run in the process before wsgi.py (a module's constant shortened for a test)."""
    started = []

    def start(tables="", prelude=None, **settings):
        port = free_port()
        config = tmp_path / f"tables-{port}.toml"
        config.write_text(tables)
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "JWT_SECRET": SECRET,
            "PORT": str(port),
            "RATE_LIMITS": "off",
            "BCRYPT_ROUNDS": "4",
            "TABLES_CONFIG": str(config),
            **{name: str(value) for name, value in settings.items()},
        }
        lay_migrated(settings)
        log_path = tmp_path / f"server-{port}.log"
        with log_path.open("w") as log:
            program = ["wsgi.py"] if prelude is None else ["-c", f"{prelude}\n{RUN_WSGI_PY}"]
            process = subprocess.Popen([sys.executable, *program], cwd=ROOT, env=env, stdout=log, stderr=log)
        started.append(process)
        server = Server(process, port, log_path)
        server.database_url = env["DATABASE_URL"]

        def answered():
            assert process.poll() is None, f"wsgi.py exited: {log_path.read_text()[-3000:]}"
            return (requests.get(f"{server.base}/health", timeout=2),)  # a 503 is falsy

        try:
            eventually(answered, 30, 0.05, ignoring=requests.RequestException)
        except AssertionError as exc:
            pytest.fail(f"wsgi.py did not start: {exc}; {log_path.read_text()[-3000:]}")
        return server

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


@pytest.fixture
def server(start_server):
    return start_server()
