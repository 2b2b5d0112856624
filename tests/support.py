"""What the tests share that is not a fixture: the test secret, a client that sends API keys, the
error-body assertions, waiting for something to happen (`eventually`), a server frozen (`freeze`),
the tools a test needs (`require`), and starting and stopping a real waitress server."""

import asyncio
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

SECRET = "test-secret-" + "x" * 60
LEAKS = ("select ", "insert into", "update ", "delete from", "sqlalchemy", "pymysql", "sqlite3",
         "traceback", "integrityerror", "operationalerror")  # fmt: skip


def eventually(condition, seconds=10, every=0.02, what=None, ignoring=()):
    """`condition()`'s first truthy answer, asked every `every` seconds; after `seconds` an
    AssertionError saying `what` did not happen (and the last answer). An exception of `ignoring`
    (a refused connection while a server starts) counts as a falsy answer. A requests.Response
    whose status is an error is falsy: answer it in a tuple when any answer will do."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = condition()
        except ignoring as exc:
            found = exc
        else:
            if found:
                return found
        if time.monotonic() >= deadline:
            said = what or getattr(condition, "__name__", "the condition")
            raise AssertionError(f"{said}: not within {seconds} s (last: {found!r})")
        time.sleep(every)


def freeze(pid):
    """SIGSTOP to a server (mariadbd, a Galera node), returning once every one of its threads has
    stopped. The signal stops the process only when the one thread it wakes runs and stops the
    others: on a loaded machine its other threads went on answering queries for tens of
    milliseconds after kill() returned."""
    os.kill(pid, signal.SIGSTOP)
    tasks = Path(f"/proc/{pid}/task")
    eventually(lambda: all(_stopped(task) for task in tasks.iterdir()), 10, 0.005, f"process {pid} stopped")


def _stopped(task):
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:  # a thread that has ended
        return True
    return stat[stat.rindex(")") + 2] in "tT"


def require(found, what, install):
    """`found` (a program's path, a module), or the test skipped because `what` is missing here; CI,
    which must run every test, fails it instead, saying what to `install` (.ci/run installs it)."""
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: install {install} (.ci/run)")
    pytest.skip(f"{what} is not installed")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def asgi_get(app, path, headers=(), extensions=None, keep=None):
    """The messages the Flask `app`, served as `python wsgi.py` serves it over ASGI
    (runtime.asgi.application), sends for a GET of `path`; `keep` makes of each message what is
    kept of it, as it is sent. The event loop runs on a thread of its own: the test's may hold
    another (Playwright's, in the same worker)."""
    from runtime import asgi

    sent = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 4000), "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"127.0.0.1"), *headers], "extensions": extensions or {}}  # fmt: skip

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message if keep is None else keep(message))

    async def get():
        await asgi.application(app, None, 2)(scope, receive, send)

    thread = threading.Thread(target=asyncio.run, args=(get(),))
    thread.start()
    thread.join(timeout=60)
    return sent


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


def assert_auth_error(response, status, error_code):
    """The auth API's error body, with nothing else in it."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"code", "error_code", "msg", "message"}, body
    assert body["code"] == status and body["error_code"] == error_code, body
    assert body["msg"] == body["message"] and body["msg"]
    return body


def assert_rest_error(response, status, sent=""):
    """The data API's error body, with no SQL and no database text. `sent` is the request's own
    text, which the body may echo when it names the bad part: SQL words in it do not count."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"message", "code", "hint", "details"}, body
    assert body["code"] == status and isinstance(body["message"], str) and body["message"]
    text = "|".join(str(value) for value in body.values()).lower()
    for piece in (sent, *sent.split(",")) if sent else ():
        text = text.replace(piece.lower(), "")
    assert not [leak for leak in LEAKS if leak in text], body
    return body


def assert_storage_error(response, status, code=None):
    """Supabase Storage's error body: statusCode as text, code, error, message; no database text."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"statusCode", "code", "error", "message"}, body
    assert body["statusCode"] == str(status) and body["message"] and body["error"]
    assert code is None or body["code"] == code, body
    assert "sqlalchemy" not in str(body).lower() and "traceback" not in str(body).lower()
    return body


def listening_socket():
    """A socket listening on a free port of 127.0.0.1, for a server made later (serve_app's
    `listener`): the port is held from now on. A port from free_port is free only until another
    process asks for one, and may be handed out again before it is bound."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def serve_app(app, threads=8, port=None, listener=None):
    """`app` behind a real waitress server on `port` (one the kernel picks as it binds, by default),
    or on `listener` (listening_socket): (base URL, a function that stops it)."""
    import threading

    from waitress.server import create_server

    if listener is not None:
        server = create_server(app, sockets=[listener], threads=threads)
    else:
        server = create_server(app, host="127.0.0.1", port=port or 0, threads=threads)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.effective_port}", lambda: stop_waitress(server, thread)


def serve_as_wsgi_py(app, threads=8):
    """`app` behind runtime.server's waitress, as `python wsgi.py` serves it (its connection limits,
    timeouts and refusals), on a free port: (the port, a function that stops it)."""
    import threading

    from runtime import server

    running = server.make_server(app, "127.0.0.1", 0, threads)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(running, stop, 5), daemon=True)
    thread.start()

    def stopped():
        stop.set()
        thread.join(timeout=15)
        assert not thread.is_alive(), "the server did not stop"

    return running.effective_port, stopped


def serve_with_realtime(app, threads=8, **options):
    """`app` as `python wsgi.py` serves it with Realtime on (runtime.asgi: uvicorn), on a free port:
    (the port, a function that stops it). `options`: asgi.make_server's (queue)."""
    import threading

    from live.sessions import Realtime
    from runtime import asgi, workers

    listener = workers.listen("127.0.0.1", 0)
    stop = threading.Event()
    running = asgi.make_server(app, Realtime(app), None, None, threads, stop, [listener], **options)
    thread = threading.Thread(target=asgi.serve, args=(running,), daemon=True)
    thread.start()
    eventually(lambda: running.started, 10, 0.02, "uvicorn started")

    def stopped():
        stop.set()
        thread.join(timeout=15)
        listener.close()
        assert not thread.is_alive(), "the server did not stop"

    return listener.getsockname()[1], stopped


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

    try:
        server.trigger.pull_trigger(close_all)
    except OSError:
        # Seen once in many runs: the loop had already closed its trigger (poll reported it
        # invalid), so there is no loop thread to hand the closing to; close from here.
        close_all()
    thread.join(timeout=10)
    assert not thread.is_alive(), "waitress did not stop"


class SupabaseJs:
    """supabase-js under node (tests/js/driver.mjs), called one method at a time:
    `js("ann", "auth.signInWithOAuth", {...})` is `{data, error}` of that call on the client named
    "ann" (made on first use, with flowType 'pkce'). A context manager; node must be installed."""

    def __init__(self, base, anon_key):
        import os
        import subprocess
        from pathlib import Path

        env = {**os.environ, "MINIBASE_URL": base, "ANON_KEY": anon_key}
        self.process = subprocess.Popen(
            ["node", "driver.mjs"],
            cwd=Path(__file__).resolve().parent / "js",
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, client, call, *args):
        import json
        import threading

        self.process.stdin.write(json.dumps({"client": client, "call": call, "args": args}) + "\n")
        self.process.stdin.flush()
        watchdog = threading.Timer(60, self.process.kill)  # a call that never answers fails the test
        watchdog.start()
        try:
            while True:
                line = self.process.stdout.readline()
                assert line, f"supabase-js's driver stopped during {call}"
                if line.startswith("@@"):
                    return json.loads(line[2:])
        finally:
            watchdog.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


def gotrue_client(base, key, http, **options):
    """supabase-py's auth client (supabase_auth.SyncGoTrueClient) as an app makes one, over the
    httpx client `http`; `options` such as flow_type="pkce"."""
    import supabase_auth

    return supabase_auth.SyncGoTrueClient(
        url=base + "/auth/v1", headers={"apikey": key}, persist_session=False, http_client=http, **options
    )


@contextmanager
def supabase_clients(base):
    """A function making supabase-py clients of `base` as an app calls create_client, over HTTP
    clients closed when the block ends."""
    import httpx
    import supabase

    opened = []

    def make(key):
        http = httpx.Client()
        opened.append(http)
        return supabase.create_client(base, key, supabase.ClientOptions(httpx_client=http))

    try:
        yield make
    finally:
        for http in opened:
            http.close()


def run_async(coroutine):
    """asyncio.run on a thread of its own: a browser test in the same worker (Playwright's sync
    API) may have left an event loop running on this one, where asyncio.run refuses to start."""
    outcome = {}

    def target():
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as error:  # handed to the test's thread below
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def refuse_once(app, table, times=1):
    """Have the database refuse the next `times` INSERTs into `table` with a deadlock (1213), each
    rolling back the whole transaction; a function that says how many refusals are left. MariaDB:
    a trigger counts the refusals in a MyISAM table, which a rollback does not undo."""
    from extensions import db

    with app.app_context():
        with db.engine.begin() as connection:
            connection.exec_driver_sql(
                "CREATE TABLE IF NOT EXISTS forced_faults (remaining INT) ENGINE=MyISAM"
            )
            connection.exec_driver_sql("DELETE FROM forced_faults")
            connection.exec_driver_sql(f"INSERT INTO forced_faults VALUES ({int(times)})")
            connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS fault_{table}")
            connection.exec_driver_sql(
                f"CREATE TRIGGER fault_{table} BEFORE INSERT ON {table} FOR EACH ROW BEGIN "
                "IF (SELECT remaining FROM forced_faults) > 0 THEN "
                "UPDATE forced_faults SET remaining = remaining - 1; "
                "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, "
                "MESSAGE_TEXT = 'Deadlock found when trying to get lock; try restarting transaction'; "
                "END IF; END"
            )

    def left():
        with app.app_context(), db.engine.connect() as connection:
            return connection.exec_driver_sql("SELECT remaining FROM forced_faults").scalar()

    return left
