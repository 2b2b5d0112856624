"""The servers a benchmark loads, and their data: the bench tables seeded into SQLite or MariaDB,
minibase as `python wsgi.py` serves it, the ceiling app, datasette and a throwaway MariaDB, each in a
process of its own whose output goes to a log file, and how to stop them and read their memory."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-" + "b" * 60
DATASETTE = ROOT / ".venv-bench" / "bin" / "datasette"
PASSWORD = "bench-password"
LOGS = Path(tempfile.gettempdir()) / "minibase-bench-logs"
# BENCH_ONLY's subsets, by the script that measures them. `make bench` runs every script: each
# measures its own subset, or nothing when BENCH_ONLY names another script's.
SUBSETS = {"bench": ("mysql", "php", "sqlite", "storage"), "bench_realtime": ("changes", "fanout")}


def measures(script):
    """Whether `script` (tools/<script>.py) has anything to measure under BENCH_ONLY: yes when it is
    unset or names one of the script's subsets, no (and a line says so) when it names another
    script's. A name no script has stops the run, listing those there are."""
    only = os.environ.get("BENCH_ONLY", "")
    if not only or only in SUBSETS.get(script, ()):
        return True
    if any(only in subsets for subsets in SUBSETS.values()):
        print(f"(BENCH_ONLY={only}: nothing to measure in tools/{script}.py)")
        return False
    names = ", ".join(sorted(name for subsets in SUBSETS.values() for name in subsets))
    raise SystemExit(f"BENCH_ONLY={only} is not a subset; the subsets are {names}")


CEILING_APP = """
import sqlite3, sys, threading
from urllib.parse import urlsplit
from flask import Flask
from waitress import serve
app = Flask("ceiling")
local = threading.local()
COLUMNS = ("id", "name", "location", "price", "owner_id")
SQL = "SELECT id, name, location, price, owner_id FROM items WHERE id = "
@app.get("/")
def index():
    return {"status": "ok"}
@app.get("/row/<int:key>")
def row(key):  # the least a read by key can do: one sqlite3 query on a connection of the thread's own
    if not hasattr(local, "db"):
        local.db = sqlite3.connect(sys.argv[3])
    found = local.db.execute(SQL + "?", (key,))
    return [dict(zip(COLUMNS, r)) for r in found.fetchall()]
LIST = ("SELECT id, name, location, price, owner_id FROM items WHERE location LIKE ? AND id > ?"
        " ORDER BY name NULLS LAST LIMIT 50")
@app.get("/list")
def rows():  # the filtered list of the bench on the same terms: one query, the rows as JSON
    if not hasattr(local, "db"):
        local.db = sqlite3.connect(sys.argv[3])
    found = local.db.execute(LIST, ("%lo%", 100))
    return [dict(zip(COLUMNS, r)) for r in found.fetchall()]
@app.get("/mysql/<int:key>")
def mysql_row(key):  # the same with one PyMySQL query
    if not hasattr(local, "mysql"):
        import pymysql
        url = urlsplit(sys.argv[4])
        local.mysql = pymysql.connect(host=url.hostname, port=url.port, user=url.username,
                                      password=url.password or "", database=url.path.lstrip("/"),
                                      charset="utf8mb4", autocommit=True)
    with local.mysql.cursor() as cursor:
        cursor.execute(SQL + "%s", (key,))
        return [dict(zip(COLUMNS, r)) for r in cursor.fetchall()]
serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=int(sys.argv[2]), _quiet=True)
"""

# minibase itself, served as `python wsgi.py` serves it, with one more route: the bound's read by
# key behind minibase's gateway (API key, CORS, security headers, the request log line) and
# nothing of the table API. What it loses to the bound is what every /rest/v1 request pays before
# its view runs.
FLOOR_APP = """
import sqlite3, sys, threading
import wsgi
local = threading.local()
COLUMNS = ("id", "name", "location", "price", "owner_id")
SQL = "SELECT id, name, location, price, owner_id FROM items WHERE id = ?"
@wsgi.app.get("/rest/v1/__floor/<int:key>")
def floor(key):
    if not hasattr(local, "db"):
        local.db = sqlite3.connect(sys.argv[1])
    return [dict(zip(COLUMNS, r)) for r in local.db.execute(SQL, (key,)).fetchall()]
wsgi.main()
"""


# --- data


def seed(url, rows):
    """items (indexed name, a location to match), owners and tags to embed; `rows` items."""
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    owners = sa.Table(
        "owners",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
    )
    items = sa.Table(
        "items",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), index=True),
        sa.Column("location", sa.String(64)),
        sa.Column("price", sa.Float),
        sa.Column("owner_id", sa.Integer, sa.ForeignKey("owners.id")),
    )
    tags = sa.Table(
        "tags",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("item_id", sa.Integer, sa.ForeignKey("items.id"), index=True),
        sa.Column("label", sa.String(32)),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    places = ["Oslo", "London", "Lodz", "Paris", "Lome", "Berlin", "Bologna", "Rome"]
    with engine.begin() as connection:
        connection.execute(sa.insert(owners), [{"id": n, "name": f"owner {n}"} for n in range(1, 51)])
        for start in range(1, rows + 1, 50000):
            chunk = range(start, min(start + 50000, rows + 1))
            connection.execute(
                sa.insert(items),
                [
                    {"id": n, "name": f"item {n}", "location": places[n % 8], "price": n % 997 / 10,
                     "owner_id": n % 50 + 1}
                    for n in chunk
                ],
            )  # fmt: skip
        connection.execute(
            sa.insert(tags), [{"item_id": n % 200 + 1, "label": f"tag {n}"} for n in range(1, 601)]
        )
    engine.dispose()


def seed_policies(url, rows):
    """posts (author_id indexed) and projects (team_id indexed) with `rows` rows each, posts_open
    with the same rows and no policy, and memberships: user 1 is in teams 1 to 5 of 100."""
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    tables = [
        sa.Table(
            name,
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("author_id", sa.Integer, index=True),
            sa.Column("title", sa.String(64)),
        )
        for name in ("posts", "posts_open")
    ]
    projects = sa.Table(
        "projects",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("team_id", sa.Integer, index=True),
        sa.Column("name", sa.String(64)),
    )
    members = sa.Table(
        "members",
        metadata,
        sa.Column("team_id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, primary_key=True),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    with engine.begin() as connection:
        for table in tables:
            connection.execute(
                sa.insert(table),
                [{"id": n, "author_id": n % 100 + 1, "title": f"post {n}"} for n in range(1, rows + 1)],
            )
        connection.execute(
            sa.insert(projects),
            [{"id": n, "team_id": n % 100 + 1, "name": f"project {n}"} for n in range(1, rows + 1)],
        )
        connection.execute(sa.insert(members), [{"team_id": team, "user_id": 1} for team in range(1, 6)])
    engine.dispose()


POLICIES_TOML = """
[tables.posts]
select = "authenticated"
[tables.posts.policies]
select = "author_id = :uid"
[tables.posts_open]
select = "authenticated"
[tables.projects]
select = "authenticated"
[tables.projects.policies]
select = "EXISTS (SELECT 1 FROM members m WHERE m.team_id = projects.team_id AND m.user_id = :uid)"
"""

TABLES_TOML = """
[tables.items]
select = "anon"
[tables.owners]
select = "anon"
[tables.tags]
select = "anon"
"""


# --- servers


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(command, log, **kwargs):
    """A server process whose output goes to a file: a pipe nobody reads would block it when full."""
    with open(log, "ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, **kwargs)


def wait_until_up(process, url, name):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited; see its log in {LOGS}")
        try:
            if requests.get(url, timeout=1).status_code < 500:
                return process
        except requests.ConnectionError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{name} did not start")


def start_minibase(workdir, url, tables=TABLES_TOML, command=("wsgi.py",), **settings):
    """minibase under `python wsgi.py` (or `command`) over `tables`, with `settings` (WORKERS, say) in
    its environment."""
    (workdir / "tables.toml").write_text(tables)
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JWT_SECRET": SECRET,
        "RATE_LIMITS": "off",
        "PORT": str(port),
        "TABLES_CONFIG": str(workdir / "tables.toml"),
        **{name: str(value) for name, value in settings.items()},
    }
    process = spawn([sys.executable, *command], LOGS / "minibase.log", cwd=ROOT, env=env)
    wait_until_up(process, f"http://127.0.0.1:{port}/health", "minibase")
    return process, f"http://127.0.0.1:{port}"


def start_ceiling(path, mysql_url=""):
    """The ceiling app over the SQLite file `path` (and the MariaDB at `mysql_url`, when given)."""
    port = free_port()
    threads = os.environ.get("THREADS", "8")
    command = [sys.executable, "-c", CEILING_APP, str(port), threads, str(path), mysql_url]
    process = spawn(command, LOGS / "ceiling.log")
    wait_until_up(process, f"http://127.0.0.1:{port}/", "the ceiling")
    return process, f"http://127.0.0.1:{port}"


def start_datasette(path):
    if not DATASETTE.exists():
        return None, None
    port = free_port()
    command = [str(DATASETTE), "serve", str(path), "--port", str(port), "--setting", "num_sql_threads", "4"]
    process = spawn(command, LOGS / "datasette.log")
    wait_until_up(process, f"http://127.0.0.1:{port}/-/versions.json", "datasette")
    return process, f"http://127.0.0.1:{port}"


def start_mariadb(workdir):
    """A throwaway MariaDB server, as the test suite starts one; (process, url) or (None, None)."""
    mariadbd = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin")
    install = shutil.which("mariadb-install-db") or shutil.which("mariadb-install-db", path="/usr/bin")
    if os.environ.get("BENCH_MARIADB", "on") == "off" or not (mariadbd and install):
        return None, None
    import pymysql

    data, port = workdir / "mariadb", free_port()
    subprocess.run(
        [install, "--no-defaults", "--user=root", f"--datadir={data}", f"--tmpdir={workdir}",
         "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=8M"],
        check=True, capture_output=True,
    )  # fmt: skip
    process = subprocess.Popen(
        [mariadbd, "--no-defaults", "--user=root", f"--datadir={data}", f"--socket={workdir}/mysql.sock",
         f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={workdir}/mysql.pid",
         f"--log-error={workdir}/mysql.err", "--innodb-log-file-size=8M"],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            connection = pymysql.connect(host="127.0.0.1", port=port, user="root")
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                process.kill()
                return None, None
            time.sleep(0.05)
    with connection.cursor() as cursor:
        cursor.execute("CREATE DATABASE bench CHARACTER SET utf8mb4")
    connection.close()
    return process, f"mysql+pymysql://root@127.0.0.1:{port}/bench?charset=utf8mb4"


def stop(process):
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def rss_mb(process):
    """The largest resident set of the process and its children (the workers), MB."""
    pids = [process.pid] + [int(p) for p in _children(process.pid)]
    sizes = [0.0]
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                sizes.append(int(line.split()[1]) / 1024)
    return max(sizes)


def _children(pid):
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = task / "children"
        if children.exists():
            yield from children.read_text().split()


def sign_up(base, key):
    body = {"email": "bench@example.com", "password": PASSWORD}
    response = requests.post(f"{base}/auth/v1/signup", json=body, headers={"apikey": key}, timeout=10)
    if response.status_code != 200:
        response = requests.post(
            f"{base}/auth/v1/token?grant_type=password", json=body, headers={"apikey": key}, timeout=10
        )
    return response.json()["access_token"]
