"""Faults made for real: a database frozen with SIGSTOP, statements past STATEMENT_TIMEOUT, a
connection killed at the end of a request. Each gets the documented JSON 503 in bounded time, and
nothing a client did not see acknowledged is changed."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymysql
import pytest
import requests
import sqlalchemy as sa

from extensions import db, state
from support import Api, eventually, free_port, freeze, serve_as_wsgi_py, serve_with_realtime

# Timing-sensitive (slow clients, deadlines, faults): under make test these go to one worker together.
pytestmark = pytest.mark.xdist_group("timing")

ROOT = Path(__file__).resolve().parent.parent

ROWS = 4000
NOTE = "x" * 190 + "end"
# Each condition matches every row, late and after much backtracking, so none cuts the work short.
SLOW_FILTERS = "&".join(f"note=like.*{'x' * k}end*" for k in range(1, 150))


def mysql_connection(url):
    return pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.username, password=url.password or "", autocommit=True
    )


def wait_until_healthy(api, seconds):
    eventually(lambda: api.get("/health").status_code == 200, seconds, 0.2, "the service recovered")


def mariadb_pid(server_url):
    connection = mysql_connection(server_url)
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@pid_file")
        pid = int(Path(cursor.fetchone()[0]).read_text())
    connection.close()
    return pid


@pytest.fixture
def slow_table(database_url, tmp_path):
    """A table of ROWS rows whose notes every SLOW_FILTERS condition matches, exposed to anon."""
    engine = sa.create_engine(database_url)
    table = sa.Table(
        "slow",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("note", sa.String(200), nullable=False),
        sa.Column("flag", sa.Integer, nullable=False, server_default="0"),
    )
    table.create(engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), [{"id": i, "note": NOTE} for i in range(1, ROWS + 1)])
    config = tmp_path / "tables.toml"
    config.write_text('[tables.slow]\nselect = "anon"\nupdate = "anon"\n')
    yield engine, table, str(config)
    engine.dispose()


def flagged(engine, table):
    with engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).where(table.c.flag == 1)).scalar()


def test_a_statement_past_the_timeout_is_a_503_and_changes_nothing(make_app, anon_key, slow_table):
    engine, table, config = slow_table
    api = Api(make_app(TABLES_CONFIG=config, STATEMENT_TIMEOUT=0.2), anon_key)

    started = time.monotonic()
    response = api.get(f"/rest/v1/slow?select=id&limit=1&{SLOW_FILTERS}", headers={"Prefer": "count=exact"})
    took = time.monotonic() - started
    assert response.status_code == 503, response.get_data(as_text=True)[:300]
    assert response.json["code"] == 503 and "not answering" in response.json["message"]
    assert took < 5

    response = api.patch(f"/rest/v1/slow?{SLOW_FILTERS}", json={"flag": 1})
    assert response.status_code == 503
    assert flagged(engine, table) == 0

    # The same request without the load is answered: the limit is per statement, not a broken state.
    assert api.get("/rest/v1/slow?id=eq.1&select=id").json == [{"id": 1}]
    # On SQLite the thread keeps its reads connection: the read that was stopped left it no
    # snapshot, so a row changed since is read as it is now.
    with engine.begin() as connection:
        connection.execute(table.update().where(table.c.id == 2).values(flag=1))
    assert api.get("/rest/v1/slow?id=eq.2&select=flag").json == [{"flag": 1}]


def test_the_same_request_under_the_default_timeout_is_answered(make_app, anon_key, slow_table):
    engine, table, config = slow_table
    api = Api(make_app(TABLES_CONFIG=config), anon_key)
    response = api.get(f"/rest/v1/slow?select=id&limit=5&{SLOW_FILTERS}")
    assert response.status_code == 200 and len(response.json) == 5


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_frozen_database_answers_503_in_bounded_time_and_recovery_is_automatic(
    make_app, anon_key, mariadb_server
):
    """mariadbd stopped with SIGSTOP: connections stay open but nothing answers, the fault that hung
    every request for as long as the freeze lasted."""
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("needs the throwaway mariadbd the suite starts itself")
    app = make_app(DB_TIMEOUT=1)
    api = Api(app, anon_key)
    token = api.sign_up()["access_token"]
    assert api.get("/health").status_code == 200
    pid = mariadb_pid(mariadb_server)
    freeze(pid)
    try:
        for path, headers in (("/health", {}), ("/auth/v1/user", {"Authorization": f"Bearer {token}"})):
            started = time.monotonic()
            response = api.get(path, headers=headers)
            took = time.monotonic() - started
            assert response.status_code == 503, (path, response.get_data(as_text=True))
            assert response.is_json
            assert took < 6, (path, took)
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_until_healthy(api, 10)
    assert api.get("/auth/v1/user", token=token).status_code == 200


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_table_first_asked_for_while_the_database_is_frozen_is_served_once_it_answers(
    make_app, anon_key, mariadb_server, slow_table
):
    """The service learns a table's columns on its first request for it. With the database frozen
    that fails: each request meanwhile is a 503, and the first once it answers reads the table. A
    failed look used to count as a look that found nothing: a 404 for the table for 5 s after."""
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("needs the throwaway mariadbd the suite starts itself")
    api = Api(make_app(TABLES_CONFIG=slow_table[2], DB_TIMEOUT=1), anon_key)
    assert api.get("/health").status_code == 200
    pid = mariadb_pid(mariadb_server)
    freeze(pid)
    try:
        for _ in range(2):
            response = api.get("/rest/v1/slow?id=eq.1&select=id")
            assert response.status_code == 503 and response.json["code"] == 503, response.json
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until_healthy(api, 10)
    assert api.get("/rest/v1/slow?id=eq.1&select=id").json == [{"id": 1}]


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_connection_killed_at_the_end_of_a_request_is_a_json_503(
    make_app, anon_key, mariadb_server, database_url
):
    """The request's work is done, then its connection dies before the transaction ends: the client
    gets the documented JSON body, not a bare 500 from teardown."""
    app = make_app()
    killing = []

    def kill_my_connection(response):
        if killing:
            own_id = db.session.execute(sa.text("SELECT CONNECTION_ID()")).scalar()
            admin = mysql_connection(mariadb_server)
            with admin.cursor() as cursor:
                cursor.execute(f"KILL {int(own_id)}")
            admin.close()
        return response

    # Registered last, so it runs first among the after_request functions: before the transaction ends.
    app.after_request(kill_my_connection)
    api = Api(app, anon_key)
    token = api.sign_up()["access_token"]

    killing.append(True)
    response = api.get("/auth/v1/user", token=token)
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.json["error_code"] == "database_unavailable"
    killing.clear()
    assert api.get("/auth/v1/user", token=token).status_code == 200


@pytest.mark.fresh_database
@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_database_down_at_start_is_a_503_until_it_answers_then_it_is_migrated(
    make_app, anon_key, mariadb_server
):
    """The service starts with its database frozen (SIGSTOP): it does not crash, every request is a
    JSON 503, and when the database answers again the migrations run and the service serves."""
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("needs the throwaway mariadbd the suite starts itself")
    pid = mariadb_pid(mariadb_server)
    freeze(pid)
    try:
        app = make_app(DB_TIMEOUT=1)
        api = Api(app, anon_key)
        health = api.get("/health")
        assert health.status_code == 503 and health.json == {"status": "unavailable"}
        refused = api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"})
        assert refused.status_code == 503 and refused.json["error_code"] == "database_unavailable"
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until_healthy(api, 15)
    assert api.sign_up()["user"]["email"] == "ann@example.com"  # migrated: its tables are there


def test_wsgi_started_with_its_database_down_says_so_in_one_line(tmp_path):
    """`python wsgi.py` with DATABASE_URL at a closed port: no traceback, one line naming the host and
    port but not the password, and /health answers 503."""
    closed, port = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"mysql+pymysql://root:hunter2-secret@127.0.0.1:{closed}/app",
        "DB_TIMEOUT": "1",
        "JWT_SECRET": "s" * 40,
        "PORT": str(port),
    }
    log = tmp_path / "wsgi.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "wsgi.py"], cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    try:

        def answered():
            assert process.poll() is None, log.read_text()
            return (requests.get(f"http://127.0.0.1:{port}/health", timeout=5),)  # a 503 is falsy

        (health,) = eventually(answered, 30, 0.1, "wsgi.py answered", ignoring=requests.ConnectionError)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    text = log.read_text()
    assert health.status_code == 503
    assert "Traceback" not in text and "hunter2" not in text
    assert f"the database at 127.0.0.1:{closed} is not answering" in text


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_reads_on_pooled_connections_the_server_killed_are_answered(
    make_app, anon_key, mariadb_server, database_url, tmp_path
):
    """Every pooled connection is killed between requests (as a restart or an idle timeout does):
    the next reads find theirs dead, try again on new ones, and the client sees only the answer."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(20))")
        connection.exec_driver_sql("INSERT INTO notes VALUES (1, 'one'), (2, 'two')")
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text('[tables.notes]\nselect = "anon"\n')
    app = make_app(TABLES_CONFIG=str(config))
    api = Api(app, anon_key)
    token = api.sign_up()["access_token"]
    with app.app_context():  # three connections in the reads pool, as a busy server has
        held = [state().reads.raw_connection() for _ in range(3)]
        for connection in held:
            connection.close()
    assert api.get("/rest/v1/notes?id=eq.1").json == [{"id": 1, "body": "one"}]

    database = sa.make_url(database_url).database
    killed = kill_connections(mariadb_server, database)
    assert len(killed) >= 3

    for _ in range(4):  # more reads than connections were pooled: none meets a dead one unanswered
        assert api.get("/rest/v1/notes?id=eq.2").json == [{"id": 2, "body": "two"}]
        assert api.get("/auth/v1/user", token=token).json["email"] == "ann@example.com"
    admin = mysql_connection(mariadb_server)
    with admin.cursor() as cursor:
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s", (database,))
        assert not {row[0] for row in cursor.fetchall()} & killed
        # The reads hold no transaction once answered, so no lock: the table drops at once.
        cursor.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SET SESSION lock_wait_timeout = 2")
        cursor.execute(f"DROP TABLE `{database}`.notes")
    admin.close()


def kill_connections(server_url, database):
    """Every connection to `database` killed, as a restart or an idle timeout does; their ids."""
    admin = mysql_connection(server_url)
    with admin.cursor() as cursor:
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s", (database,))
        killed = {row[0] for row in cursor.fetchall()}
        for connection_id in killed:
            cursor.execute(f"KILL {int(connection_id)}")
    admin.close()
    return killed


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_writes_on_pooled_connections_the_server_killed_are_answered(
    make_app, anon_key, mariadb_server, database_url, tmp_path, caplog
):
    """Every pooled connection of both engines killed between requests (a restart, KILL, an idle
    timeout), the next requests sent at once: each connection is seen closed at checkout, without
    a PING, and made again before any statement, so no unit of work is tried again and a one-row
    insert, which commits by itself, never meets a dead connection."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(20))")
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text('[tables.notes]\nselect = "anon"\ninsert = "anon"\n')
    app = make_app(TABLES_CONFIG=str(config))
    api = Api(app, anon_key)
    database = sa.make_url(database_url).database
    assert api.post("/rest/v1/notes", json={"body": "warm"}).status_code == 201
    with app.app_context():  # connections in both pools, as a busy server has
        held = [engine.raw_connection() for engine in (db.engine, state().reads) for _ in range(3)]
        for connection in held:
            connection.close()

    killed = kill_connections(mariadb_server, database)
    assert len(killed) >= 6
    with caplog.at_level(logging.INFO, logger="minibase"):
        for n in range(4):
            assert api.post("/rest/v1/notes", json={"body": f"note {n}"}).status_code == 201
            assert api.get("/health").status_code == 200
            assert api.get("/rest/v1/notes?id=eq.1").json == [{"id": 1, "body": "warm"}]
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]

    admin = mysql_connection(mariadb_server)
    with admin.cursor() as cursor:
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s", (database,))
        assert not {row[0] for row in cursor.fetchall()} & killed
        cursor.execute(f"SELECT body FROM `{database}`.notes ORDER BY id")
        bodies = [row[0] for row in cursor.fetchall()]
        cursor.execute(f"DROP TABLE `{database}`.notes")
    admin.close()
    assert bodies == ["warm", *(f"note {n}" for n in range(4))]


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_one_row_insert_whose_connection_dies_while_it_runs_is_a_503_not_tried_again(
    make_app, anon_key, mariadb_server, database_url, tmp_path
):
    """A one-row insert commits by itself: its connection killed while the INSERT runs, it may have
    committed, so it is not sent again (it could be stored twice): the client gets the JSON 503.
    (Killed mid-statement, MariaDB rolled it back: no row.)"""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(20))")
        connection.exec_driver_sql(
            "CREATE TRIGGER slow_notes BEFORE INSERT ON notes FOR EACH ROW "
            "SET NEW.body = IF(SLEEP(3), NEW.body, NEW.body)"
        )
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text('[tables.notes]\nselect = "anon"\ninsert = "anon"\n')
    api = Api(make_app(TABLES_CONFIG=str(config), DB_TIMEOUT=10), anon_key)
    database = sa.make_url(database_url).database
    admin = mysql_connection(mariadb_server)

    def kill_the_insert():
        deadline = time.monotonic() + 5
        with admin.cursor() as cursor:
            while time.monotonic() < deadline:
                running = "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND INFO LIKE %s"
                cursor.execute(running, (database, "INSERT INTO notes%"))
                found = cursor.fetchone()
                if found:
                    cursor.execute(f"KILL {int(found[0])}")
                    return
                time.sleep(0.02)

    killer = threading.Thread(target=kill_the_insert)
    killer.start()
    try:
        response = api.post("/rest/v1/notes", json={"body": "once"})
    finally:
        killer.join()
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.json["message"] == "The database is not answering, try again later"
    with admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{database}`.notes")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f"DROP TABLE `{database}`.notes")
    admin.close()


FROZEN_DB_TIMEOUT = 2
MARGIN = 1.0  # seconds past DB_TIMEOUT a 503 may take: the request's own work, a loaded machine


@pytest.mark.alone  # a sign-in's time includes bcrypt's, which a loaded machine stretches past MARGIN
@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
@pytest.mark.parametrize("served_by", ["waitress", "uvicorn"])
def test_a_frozen_database_ends_every_request_within_db_timeout_in_all(
    make_app, anon_key, mariadb_server, database_url, tmp_path, served_by
):
    """mariadbd frozen (SIGSTOP) under reads, writes and sign-ins already in flight, over a real
    server whose pools hold connections made before the freeze: each request's waits on the
    database (connects, reads, writes, and every retry of a lost connection) end within DB_TIMEOUT
    in all, then a JSON 503. Ten attempts of DB_TIMEOUT each once kept a read waiting ~20 s."""
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("needs the throwaway mariadbd the suite starts itself")
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(20))")
        connection.exec_driver_sql("INSERT INTO notes (body) VALUES ('one')")
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text('[tables.notes]\nselect = "anon"\ninsert = "anon"\n')
    # bcrypt at cost 12 takes ~0.25 s: a sign-in sent just before the freeze is in flight through it.
    app = make_app(DB_TIMEOUT=FROZEN_DB_TIMEOUT, TABLES_CONFIG=str(config), BCRYPT_ROUNDS=12)
    serve = serve_as_wsgi_py if served_by == "waitress" else serve_with_realtime
    port, stop = serve(app, threads=12)
    base, headers = f"http://127.0.0.1:{port}", {"apikey": anon_key}
    credentials = {"email": "ann@example.com", "password": "secret-pw"}
    assert requests.post(f"{base}/auth/v1/signup", json=credentials, headers=headers, timeout=30).ok
    requests_by_name = {
        "sign-in": ("POST", "/auth/v1/token?grant_type=password", credentials),
        "read": ("GET", "/rest/v1/notes?id=eq.1", None),
        "write": ("POST", "/rest/v1/notes", {"body": "two"}),
        "health": ("GET", "/health", None),
    }

    def send(name, results):
        method, path, body = requests_by_name[name.split()[0]]
        started = time.monotonic()
        try:
            response = requests.request(method, base + path, json=body, headers=headers, timeout=60)
            results[name] = (response.status_code, response.headers.get("Content-Type"))
        except requests.RequestException as exc:
            results[name] = (type(exc).__name__, None)
        results[name] += (time.monotonic() - started,)

    warm = {}
    with ThreadPoolExecutor(12) as pool:  # connections in both pools, made before the freeze
        list(pool.map(lambda n: send(f"read {n}", warm), range(12)))
    assert {status for status, _, _ in warm.values()} == {200}, warm

    pid = mariadb_pid(mariadb_server)
    results = {}
    in_flight = [threading.Thread(target=send, args=(f"sign-in {n}", results)) for n in range(2)]
    for thread in in_flight:
        thread.start()
    time.sleep(0.1)  # the sign-ins have read the user and are hashing
    freeze(pid)
    try:
        names = [f"{kind} {n}" for kind in ("read", "write", "health") for n in range(3)]
        during = [threading.Thread(target=send, args=(name, results)) for name in names]
        for thread in during:
            thread.start()
        for thread in in_flight + during:
            thread.join(timeout=90)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        for name, (status, kind, took) in sorted(results.items()):
            assert status == 503 and kind == "application/json", (name, sorted(results.items()))
            assert took < FROZEN_DB_TIMEOUT + MARGIN, (name, sorted(results.items()))

        eventually(
            lambda: requests.get(f"{base}/health", timeout=10).status_code == 200,
            15,
            0.2,
            "the service recovered",
        )
        after = {}
        for name in ("read", "write", "sign-in"):
            send(name, after)
        assert [after[name][0] for name in ("read", "write", "sign-in")] == [200, 201, 200], after
    finally:
        stop()
