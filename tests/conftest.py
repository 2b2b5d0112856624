"""Fixtures: an app on a real SQLite file or a real MariaDB database, API keys, and a client that
sends them. The MariaDB server is started once per run when `mariadbd` is installed."""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pymysql
import pytest
from sqlalchemy.engine import make_url

import tokens
from app import create_app
from extensions import db

SECRET = "test-secret-" + "x" * 60
BACKENDS = ["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find(program):
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")


@pytest.fixture(scope="session")
def mariadb_server():
    """A server URL without a database: TEST_DATABASE_URL's, or a throwaway mariadbd's."""
    if os.environ.get("TEST_DATABASE_URL"):
        yield make_url(os.environ["TEST_DATABASE_URL"]).set(database=None)
        return
    mariadbd, install = find("mariadbd"), find("mariadb-install-db")
    if not (mariadbd and install):
        if os.environ.get("CI"):
            pytest.fail("CI must run the MySQL tests: install mariadb-server")
        pytest.skip("mariadbd is not installed and TEST_DATABASE_URL is not set")
    workdir = Path(tempfile.mkdtemp(prefix="minibase-mariadb-"))
    port = free_port()
    subprocess.run(
        [install, "--no-defaults", "--user=root", f"--datadir={workdir}/data",
         "--auth-root-authentication-method=normal", "--skip-test-db",
         "--innodb-log-file-size=8M"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = subprocess.Popen(
        [mariadbd, "--no-defaults", "--user=root", f"--datadir={workdir}/data",
         f"--socket={workdir}/sock", f"--port={port}", "--bind-address=127.0.0.1",
         f"--pid-file={workdir}/pid", f"--log-error={workdir}/err.log",
         "--innodb-log-file-size=8M", "--lock-wait-timeout=5", "--innodb-lock-wait-timeout=5",
         "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            pymysql.connect(host="127.0.0.1", port=port, user="root").close()
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"mariadbd did not start: {(workdir / 'err.log').read_text()[-2000:]}")
            time.sleep(0.05)
    yield make_url(f"mysql+pymysql://root@127.0.0.1:{port}/?charset=utf8mb4")
    server.terminate()
    server.wait(timeout=30)
    shutil.rmtree(workdir, ignore_errors=True)


def mysql_admin(server_url, sql):
    connection = pymysql.connect(
        host=server_url.host,
        port=server_url.port or 3306,
        user=server_url.username,
        password=server_url.password or "",
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
        connection.commit()
    finally:
        connection.close()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def database_url(backend, request, tmp_path):
    """A fresh, empty database on the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/test.db"
        return
    server = request.getfixturevalue("mariadb_server")
    name = f"minibase_test_{uuid.uuid4().hex[:12]}"
    mysql_admin(server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    yield server.set(database=name).render_as_string(hide_password=False)
    mysql_admin(server, f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture
def make_app(database_url, tmp_path):
    """create_app on the test database; keyword arguments override settings."""
    apps = []

    def make(**overrides):
        settings = {
            "DATABASE_URL": database_url,
            "JWT_SECRET": SECRET,
            "BCRYPT_ROUNDS": 4,
            "RATE_LIMITS": False,
            **overrides,
        }
        app = create_app(settings)
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


@pytest.fixture
def app(make_app):
    return make_app()


class Api:
    """A test client that sends the API key, and a bearer token when given one."""

    def __init__(self, app, key):
        self.app = app
        self.client = app.test_client()
        self.key = key

    def request(self, method, path, token=None, headers=None, **kwargs):
        sent = {"apikey": self.key} if self.key else {}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        sent.update(headers or {})
        return self.client.open(path, method=method, headers=sent, **kwargs)

    def get(self, path, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path, **kwargs):
        return self.request("POST", path, **kwargs)

    def patch(self, path, **kwargs):
        return self.request("PATCH", path, **kwargs)

    def put(self, path, **kwargs):
        return self.request("PUT", path, **kwargs)

    def delete(self, path, **kwargs):
        return self.request("DELETE", path, **kwargs)

    def head(self, path, **kwargs):
        return self.request("HEAD", path, **kwargs)

    def sign_up(self, email="ann@example.com", password="secret-pw", **data):
        response = self.post("/auth/v1/signup", json={"email": email, "password": password, "data": data})
        assert response.status_code == 200, response.json
        return response.json

    def sign_in(self, email="ann@example.com", password="secret-pw"):
        return self.post("/auth/v1/token?grant_type=password", json={"email": email, "password": password})


@pytest.fixture
def anon_key():
    return tokens.api_key("anon", SECRET)


@pytest.fixture
def service_key():
    return tokens.api_key("service_role", SECRET)


@pytest.fixture
def api(app, anon_key):
    return Api(app, anon_key)


def assert_auth_error(response, status, error_code):
    """The auth API's error body (SPEC §3.4), with nothing else in it."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"code", "error_code", "msg", "message"}, body
    assert body["code"] == status and body["error_code"] == error_code, body
    assert body["msg"] == body["message"] and body["msg"]
    return body


def assert_rest_error(response, status):
    """The data API's error body (SPEC §4.4): no SQL, no database text."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"message", "code", "hint", "details"}, body
    assert body["code"] == status and isinstance(body["message"], str) and body["message"]
    text = response.get_data(as_text=True).lower()
    for leak in ("select ", "insert into", "update ", "delete from", "sqlalchemy", "pymysql",
                 "sqlite3", "traceback", "integrityerror", "operationalerror"):  # fmt: skip
        assert leak not in text, body
    return body


@pytest.fixture
def live_server(app):
    """The app served by a real waitress server on a free port; yields its base URL."""
    from waitress.server import create_server

    server = create_server(app, host="127.0.0.1", port=free_port(), threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    stop_waitress(server, thread)


def stop_waitress(server, thread):
    """Let the worker threads finish their requests, then close every channel from the server's own
    loop thread (closing them from here races with select() and with workers waking the loop)."""
    dispatcher = server.task_dispatcher
    dispatcher.shutdown(timeout=5)
    deadline = time.monotonic() + 10
    while dispatcher.active_count and time.monotonic() < deadline:
        time.sleep(0.01)

    def close_all():
        for channel in list(server._map.values()):
            channel.handle_close()

    server.trigger.pull_trigger(close_all)
    thread.join(timeout=10)
    assert not thread.is_alive(), "waitress did not stop"
