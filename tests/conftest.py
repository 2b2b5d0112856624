"""Fixtures: an app on a real SQLite file or a real MariaDB database, API keys, and a client that
sends them. The MariaDB server is started once per test process when `mariadbd` is installed: under
pytest-xdist (`make test` runs `-n`) each worker has its own, and each test its own database on it.
"""

import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app import create_app, upgrade_database
from auth import tokens
from extensions import db
from migrated import Migrated
from support import SECRET, Api, eventually, free_port, require, serve_app, stop_waitress

BACKENDS = ["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)]
# Tests that start Chromium, node (supabase-js, the OpenID provider) or `python wsgi.py` for each
# test: some 150 of 4,200 tests and a third of the parallel run's CPU. They are marked `slow`:
# `make test` leaves them, with the `alone` ones, to `make test-slow`; CI runs both.
SLOW = ("tests/live/", "tests/dashboard/", "tests/test_external.py")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


SHM = Path("/dev/shm")
SHM_NEEDED = 2 << 30  # bytes free: a run writes some 200 MB, and each MariaDB server 120 MB


def in_memory():
    """/dev/shm when it is there with room, else None (the temporary directory). Each test makes a
    database, or two: in memory that costs milliseconds, where a disk syncs every table's file and
    every commit, most of a second for a MariaDB database, and longer while others use the disk."""
    try:
        stat = os.statvfs(SHM)
    except OSError:
        return None
    if stat.f_bavail * stat.f_frsize < SHM_NEEDED or not os.access(SHM, os.W_OK):
        return None
    return str(SHM)


if not os.environ.get("TMPDIR"):  # tmp_path, and so the SQLite databases, in memory too
    tempfile.tempdir = in_memory()


def worker():
    """The pytest-xdist worker this process is ("gw0", "gw1", …), or "main" in a serial run."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@contextmanager
def held(lock_path):
    """An exclusive lock on `lock_path` across the workers (and other runs on this machine)."""
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def find(program):
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")


@pytest.fixture(scope="session")
def mariadb_server():
    """A server URL without a database: TEST_DATABASE_URL's, or a throwaway mariadbd's, one per
    test process (each xdist worker starts its own on a free port)."""
    if os.environ.get("TEST_DATABASE_URL"):
        yield make_url(os.environ["TEST_DATABASE_URL"]).set(database=None)
        return
    mariadbd, install = find("mariadbd"), find("mariadb-install-db")
    require(mariadbd and install, "mariadbd (or TEST_DATABASE_URL)", "mariadb-server")
    # Its own --tmpdir too: two mariadb-install-db runs at once in /tmp clash on a temporary table.
    workdir = Path(tempfile.mkdtemp(prefix=f"minibase-mariadb-{worker()}-", dir=in_memory()))
    installed = subprocess.run(
        [install, "--no-defaults", "--user=root", f"--datadir={workdir}/data", f"--tmpdir={workdir}",
         "--auth-root-authentication-method=normal", "--skip-test-db",
         "--innodb-log-file-size=8M"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert installed.returncode == 0, f"mariadb-install-db failed: {installed.stderr[-2000:]}"
    for _ in range(3):  # a free port taken by another process before mariadbd binds it: again
        server, port = start_mariadbd(mariadbd, workdir)
        if server is not None:
            break
    else:
        log = workdir / "err.log"
        pytest.fail(f"mariadbd did not start: {log.read_text()[-2000:] if log.exists() else 'no log'}")
    # The throwaway server offers no TLS, which PyMySQL tries by default: each connection then loaded
    # the system's CA certificates for nothing, some 50 ms of CPU, a tenth of a MySQL test.
    yield make_url(f"mysql+pymysql://root@127.0.0.1:{port}/?charset=utf8mb4&ssl_disabled=true")
    server.terminate()
    server.wait(timeout=30)
    shutil.rmtree(workdir, ignore_errors=True)


def start_mariadbd(mariadbd, workdir, seconds=120):
    """mariadbd on `workdir`'s data and a free port, once it answers: (process, port), or (None,
    None) when it exited or did not answer within `seconds` (a loaded machine starts it slowly)."""
    port = free_port()
    server = subprocess.Popen(
        [mariadbd, "--no-defaults", "--user=root", f"--datadir={workdir}/data", f"--tmpdir={workdir}",
         f"--socket={workdir}/sock", f"--port={port}", "--bind-address=127.0.0.1",
         f"--pid-file={workdir}/pid", f"--log-error={workdir}/err.log",
         "--innodb-log-file-size=8M", "--lock-wait-timeout=5", "--innodb-lock-wait-timeout=5",
         "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"],
    )  # fmt: skip

    def answered():
        assert server.poll() is None, "mariadbd exited"
        pymysql.connect(host="127.0.0.1", port=port, user="root", ssl_disabled=True).close()
        return True

    try:
        eventually(answered, seconds, 0.05, ignoring=pymysql.err.OperationalError)
    except AssertionError:
        server.kill()
        server.wait()
        return None, None
    return server, port


def mysql_admin(server_url, sql):
    connection = pymysql.connect(
        host=server_url.host,
        port=server_url.port or 3306,
        user=server_url.username,
        password=server_url.password or "",
        ssl_disabled=server_url.query.get("ssl_disabled") == "true",
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


def empty_database(backend, request, tmp_path, name):
    """A fresh, empty database named after `name` on the backend under test, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/{name}.db"
        return
    server = request.getfixturevalue("mariadb_server")
    name = f"minibase_{name}_{uuid.uuid4().hex[:12]}"
    mysql_admin(server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    yield server.set(database=name).render_as_string(hide_password=False)
    mysql_admin(server, f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture
def database_url(backend, request, tmp_path):
    """A fresh, empty database on the backend under test."""
    yield from empty_database(backend, request, tmp_path, "test")


@pytest.fixture
def other_database_url(backend, request, tmp_path):
    """A second, empty database on the backend under test (a backup's restore target)."""
    yield from empty_database(backend, request, tmp_path, "restored")


def migrate_and_take(url, storage):
    """Migrate the empty database at `url` as the service does at its first start and take down
    what that left (tests/migrated.py); laid into a second database, it must read back the same."""
    app = create_app(
        {"DATABASE_URL": url, "JWT_SECRET": SECRET, "AUTO_MIGRATE": False, "STORAGE_ROOT": storage}
    )
    with app.app_context():
        upgrade_database()
        db.engine.dispose()
    return Migrated.take(url)


def assert_lays_exactly(migrated, url):
    assert migrated.lay_into(url)
    assert Migrated.take(url) == migrated, "the migrated tables did not copy exactly"


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory):
    """The SQLite tables the migrations make, taken once per test process."""
    where = tmp_path_factory.mktemp("migrated")
    migrated = migrate_and_take(f"sqlite:///{where}/migrated.db", str(where / "storage"))
    assert_lays_exactly(migrated, f"sqlite:///{where}/copy.db")
    return migrated


@pytest.fixture(scope="session")
def migrated_mysql(mariadb_server, tmp_path_factory):
    """The MariaDB/MySQL tables the migrations make, taken once per test process."""
    names = [f"minibase_migrated_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for name in names:
        mysql_admin(mariadb_server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    urls = [mariadb_server.set(database=name).render_as_string(hide_password=False) for name in names]
    try:
        migrated = migrate_and_take(urls[0], str(tmp_path_factory.mktemp("migrated")))
        assert_lays_exactly(migrated, urls[1])
    finally:
        for name in names:
            mysql_admin(mariadb_server, f"DROP DATABASE IF EXISTS {name}")
    return migrated


@pytest.fixture
def lay_migrated(request, database_url):
    """lay_migrated(settings): called before the service starts on the test's database with
    `settings`, lays the tables its migrations make into it, unless the test is marked
    `fresh_database` (one of the migrations or of a first start), `settings` name AUTO_MIGRATE, or
    name another DATABASE_URL: then the service migrates the database itself, as it did."""
    if request.node.get_closest_marker("fresh_database"):
        return lambda settings: None
    migrated = request.getfixturevalue(f"migrated_{make_url(database_url).get_backend_name()}")

    def lay(settings):
        if settings.get("DATABASE_URL", database_url) == database_url and "AUTO_MIGRATE" not in settings:
            migrated.lay_into(database_url)

    return lay


@pytest.fixture
def make_app(database_url, tmp_path, lay_migrated):
    """create_app on the test database, which holds the service's migrated tables (lay_migrated);
    keyword arguments override settings."""
    apps = []

    def make(**overrides):
        settings = {
            "DATABASE_URL": database_url,
            "JWT_SECRET": SECRET,
            "BCRYPT_ROUNDS": 4,
            "RATE_LIMITS": False,
            "STORAGE_ROOT": str(tmp_path / "storage"),
            **overrides,
        }
        lay_migrated(overrides)
        app = create_app(settings)
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        # A function's worker processes and sockets end with the test, not at a later test's garbage
        # collection (a ResourceWarning there fails that other test).
        runner = app.extensions["minibase"].function_runner
        if runner is not None:
            runner.close()
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def anon_key():
    return tokens.api_key("anon", SECRET)


@pytest.fixture
def service_key():
    return tokens.api_key("service_role", SECRET)


@pytest.fixture
def api(app, anon_key):
    return Api(app, anon_key)


SDK_TABLES = """
[tables.notes]
select = "owner"
insert = "owner"
update = "owner"
delete = "owner"
owner_column = "user_id"

[tables.tags]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"
"""


@pytest.fixture
def sdk_server(make_app, database_url, backend, tmp_path):
    """What the official-SDK tests drive: `notes` under the owner rule and `tags` open to anon (its
    UNIQUE written inline, the form SQLite's reflection once missed), served by waitress."""
    auto = "AUTO_INCREMENT" if backend == "mysql" else "AUTOINCREMENT"
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                f"CREATE TABLE notes (id INTEGER PRIMARY KEY {auto}, user_id INTEGER NOT NULL, "
                "body VARCHAR(200) NOT NULL)"
            )
        )
        connection.execute(
            sa.text(
                f"CREATE TABLE tags (id INTEGER PRIMARY KEY {auto}, name VARCHAR(50) NOT NULL UNIQUE, "
                "uses INTEGER)"
            )
        )
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(SDK_TABLES)
    base, stop = serve_app(make_app(TABLES_CONFIG=str(config)))
    yield base
    stop()


@pytest.fixture
def live_server(app):
    """The app served by a real waitress server on a free port; yields its base URL."""
    from waitress.server import create_server

    server = create_server(app, host="127.0.0.1", port=free_port(), threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    stop_waitress(server, thread)


JS_DIR = Path(__file__).resolve().parent / "js"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def chromium(node_modules):
    """Debian's Chromium driven by Playwright, launched once per test process by its path (no browser
    download). Every test that drives it shares this one: Playwright's sync API refuses to start
    while another of its instances runs in the process."""
    require(Path(CHROMIUM).exists(), "chromium", "chromium")
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM)
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture(scope="session")
def node_modules():
    """supabase-js as tests/js/package-lock.json pins it, installed once (the first worker to get here
    installs it while the others wait); the test is skipped where node and npm are not installed."""
    require(shutil.which("node") and shutil.which("npm"), "node and npm", "node 20 and npm")
    modules = JS_DIR / "node_modules"
    wanted = (modules / "@supabase" / "supabase-js", modules / "otpauth", modules / "axe-core",
              modules / "tus-js-client", modules / "@uppy" / "tus", modules / ".bin" / "esbuild",
              modules / "realtime-js-2.9")  # fmt: skip
    with held(JS_DIR / ".npm-ci.lock"):
        if not all(path.exists() for path in wanted):
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"],
                cwd=JS_DIR,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
    return JS_DIR / "node_modules"
