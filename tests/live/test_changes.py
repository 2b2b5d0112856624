"""Postgres changes from every writer (the REST API, and plain SQL as another program writes it),
captured by triggers in the database, delivered in order as Supabase's payload; and who sees what:
the subscriber's own rule, owner and row policy, hidden columns, a token logged out or expired
mid-subscription and a fresh one resuming. SQLite and MariaDB."""

import os
import shutil
import threading
import time

import jwt
import pytest
import requests
import sqlalchemy as sa
from phoenix import Client, change, sign_up

from auth import tokens
from live import changelog
from support import SECRET, require
from tools.galera import Redis

TABLES = """
[tables.messages]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"
realtime = true

[tables.notes]
select = "owner"
insert = "owner"
update = "owner"
delete = "owner"
owner_column = "user_id"
realtime = true

[tables.posts]
select = "anon"
insert = "authenticated"
columns = ["id", "title", "published", "author_id"]
realtime = true

[tables.posts.policies]
select = "published = 1 OR author_id = :uid"

[tables.plain]
select = "anon"

[tables.vault]
select = "service_role"
realtime = true
"""


@pytest.fixture
def database(database_url, backend):
    """The app's tables, made by the app's own migration-free SQL, and a way to write to them as
    another program would: plain SQL on a connection of its own."""
    auto = "AUTO_INCREMENT" if backend == "mysql" else "AUTOINCREMENT"
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        for statement in (
            f"CREATE TABLE messages (id INTEGER PRIMARY KEY {auto}, room INTEGER, body VARCHAR(200))",
            f"CREATE TABLE notes (id INTEGER PRIMARY KEY {auto}, user_id INTEGER NOT NULL, "
            "body VARCHAR(200))",
            f"CREATE TABLE posts (id INTEGER PRIMARY KEY {auto}, title VARCHAR(200), "
            "published INTEGER NOT NULL, author_id INTEGER, secret VARCHAR(200))",
            f"CREATE TABLE plain (id INTEGER PRIMARY KEY {auto}, body VARCHAR(200))",
            f"CREATE TABLE vault (id INTEGER PRIMARY KEY {auto}, body VARCHAR(200))",
        ):
            connection.execute(sa.text(statement))

    class Writer:
        def __call__(self, sql, **values):
            with engine.begin() as connection:
                connection.execute(sa.text(sql), values)

        def rolled_back(self, sql):
            with engine.connect() as connection, connection.begin() as transaction:
                connection.execute(sa.text(sql))
                transaction.rollback()

    yield Writer()
    engine.dispose()


def changes(name, *wanted):
    return [{"event": event, "schema": "public", "table": table, **extra} for event, table, extra in wanted]


def test_changes_from_every_writer_in_supabases_payload(start_server, database):
    server = start_server(TABLES)
    watcher, filtered = Client(server), Client(server, "2.0.0")
    reply = watcher.join("db", postgres_changes=changes("db", ("*", "messages", {})))
    assert reply["status"] == "ok"
    [binding] = reply["response"]["postgres_changes"]
    assert binding == {"id": binding["id"], "event": "*", "schema": "public", "table": "messages"}
    system = watcher.until("system")["payload"]
    assert system == {"extension": "postgres_changes", "status": "ok", "message": "Subscribed to PostgreSQL",
                      "channel": "db"}  # fmt: skip
    wanted = changes(
        "f", ("INSERT", "messages", {"filter": "room=eq.2"}), ("*", "messages", {"filter": "room=in.(3,4)"})
    )
    replied = filtered.join("f", postgres_changes=wanted)["response"]["postgres_changes"]
    assert [entry["filter"] for entry in replied] == ["room=eq.2", "room=in.(3,4)"]

    posted = requests.post(f"{server.base}/rest/v1/messages", json={"room": 1, "body": "via rest"},
                           headers={"apikey": server.anon}, timeout=10)  # fmt: skip
    assert posted.status_code == 201
    ids, data = change(watcher)
    assert ids == [binding["id"]]
    assert data["type"] == "INSERT" and data["schema"] == "public" and data["table"] == "messages"
    assert data["record"] == {"id": 1, "room": 1, "body": "via rest"} and data["errors"] is None
    assert {"name": "room", "type": "int8"} in data["columns"] and data["commit_timestamp"].endswith("Z")
    assert "old_record" not in data

    database("INSERT INTO messages (room, body) VALUES (2, 'by another program')")
    assert change(watcher)[1]["record"] == {"id": 2, "room": 2, "body": "by another program"}
    database("UPDATE messages SET body = 'edited' WHERE id = 2")
    _, data = change(watcher)
    assert data["type"] == "UPDATE" and data["record"]["body"] == "edited" and data["old_record"] == {"id": 2}
    database("DELETE FROM messages WHERE id = 1")
    _, data = change(watcher)
    assert data["type"] == "DELETE" and data["old_record"] == {"id": 1} and "record" not in data
    database.rolled_back("INSERT INTO messages (room, body) VALUES (3, 'rolled back')")
    database("INSERT INTO messages (room, body) VALUES (4, 'in a list')")
    database("INSERT INTO plain (body) VALUES ('never told')")
    assert change(watcher)[1]["record"]["room"] == 4  # not the rolled-back one, and not plain's

    ids, data = change(filtered)  # the INSERT of room 2; not its UPDATE (that binding is INSERT only)
    assert data["record"]["room"] == 2 and data["type"] == "INSERT" and ids == [replied[0]["id"]]
    ids, data = change(filtered)
    assert data["record"]["room"] == 4 and ids == [replied[1]["id"]]
    filtered.nothing()

    refused = watcher.join("plain", postgres_changes=changes("p", ("*", "plain", {})))
    assert refused["status"] == "error"
    assert refused["response"]["reason"].startswith("RealtimeDisabledForConfiguration: Unable to subscribe")
    hidden = watcher.join("hidden", postgres_changes=changes("h", ("*", "posts", {"filter": "secret=eq.x"})))
    assert hidden["status"] == "error"  # a hidden column cannot be filtered on


def test_each_subscriber_sees_only_what_it_may_select_now(start_server, database):
    server = start_server(TABLES)
    ann_token, ann = sign_up(server, "ann@example.com")
    _, bob = sign_up(server, "bob@example.com")
    watching = changes("w", ("*", "notes", {}), ("*", "posts", {}))
    anna = Client(server)
    assert anna.join("mine", access_token=ann_token, postgres_changes=watching)["status"] == "ok"
    assert anna.join("chat", broadcast={"self": True})["status"] == "ok"
    stranger = Client(server)  # anon: posts' rule admits it, the policy shows it published rows only
    assert stranger.join("posts", postgres_changes=changes("p", ("*", "posts", {})))["status"] == "ok"
    # Notes are the owner's: anon is joined all the same (its user may sign in), and told none of them.
    assert stranger.join("notes", postgres_changes=changes("n", ("*", "notes", {})))["status"] == "ok"
    stranger.until("system")

    database("INSERT INTO notes (user_id, body) VALUES (:bob, 'bob''s note')", bob=bob)
    database(
        "INSERT INTO posts (title, published, author_id, secret) VALUES ('bob draft', 0, :bob, 's1')", bob=bob
    )
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'ann''s note')", ann=ann)
    _, data = change(anna)
    assert data["table"] == "notes" and data["record"]["body"] == "ann's note"  # not bob's, not his draft
    database(
        "INSERT INTO posts (title, published, author_id, secret) VALUES ('ann draft', 0, :ann, 's2')", ann=ann
    )
    database(
        "INSERT INTO posts (title, published, author_id, secret) VALUES ('bob public', 1, :bob, 's3')",
        bob=bob,
    )
    _, draft = change(anna)
    _, public = change(anna)
    assert (draft["record"]["title"], public["record"]["title"]) == ("ann draft", "bob public")
    assert "secret" not in draft["record"] and "secret" not in {c["name"] for c in draft["columns"]}
    _, seen = change(stranger)
    assert seen["record"] == {"id": 3, "title": "bob public", "published": 1, "author_id": bob}
    stranger.nothing()
    database("DELETE FROM notes WHERE user_id = :bob", bob=bob)  # judged on the row as it was: not hers
    database("UPDATE posts SET published = 0 WHERE id = 3")  # unpublished: no longer hers to see
    database("DELETE FROM notes WHERE user_id = :ann", ann=ann)
    _, deleted = change(anna)
    assert deleted["type"] == "DELETE" and deleted["table"] == "notes" and deleted["old_record"] == {"id": 2}
    anna.nothing()
    stranger.nothing()

    # Logged out mid-subscription: the channel's data stops with Supabase's system message; the
    # socket and its other channel go on; a fresh token (setAuth) resumes it.
    out = requests.post(f"{server.base}/auth/v1/logout", headers={"apikey": server.anon,
                        "Authorization": f"Bearer {ann_token}"}, timeout=10)  # fmt: skip
    assert out.status_code == 204
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'after logout')", ann=ann)
    system = anna.until("system")["payload"]
    assert system["extension"] == "system" and system["status"] == "error" and system["channel"] == "mine"
    anna.send("realtime:chat", "broadcast", {"type": "broadcast", "event": "still", "payload": {}}, "1")
    assert anna.until("broadcast")["payload"]["event"] == "still"
    anna.nothing()
    signed_in = requests.post(f"{server.base}/auth/v1/token?grant_type=password",
                              json={"email": "ann@example.com", "password": "secret-pw"},
                              headers={"apikey": server.anon}, timeout=10).json()  # fmt: skip
    anna.send("realtime:mine", "access_token", {"access_token": signed_in["access_token"]}, "1")
    # The token's event has no reply. Without waiting for it to be handled, a write from this
    # process, not through the server, could reach the change feed before the server had read the
    # token's frame: seen once, in a loaded CI run.
    anna.handled()
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'resumed')", ann=ann)
    assert change(anna)[1]["record"]["body"] == "resumed"


def test_a_join_before_sign_in_gets_the_users_changes_once_the_token_comes(start_server, database):
    """As an app joins at page load, before its session is restored: the join carries the anon key
    and the user's token follows as an access_token event. The join succeeds; each change is judged
    with the token the channel holds when it comes. Only tables no token could read are refused."""
    server = start_server(TABLES)
    ann_token, ann = sign_up(server, "ann@example.com")
    _, bob = sign_up(server, "bob@example.com")
    page = Client(server)
    wanted = changes("n", ("*", "notes", {}), ("*", "posts", {}))
    reply = page.join("page", access_token=server.anon, postgres_changes=wanted)
    assert reply["status"] == "ok" and len(reply["response"]["postgres_changes"]) == 2
    page.until("system")
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'while anon')", ann=ann)
    database("INSERT INTO posts (title, published, author_id) VALUES ('draft', 0, :ann)", ann=ann)
    database("INSERT INTO posts (title, published, author_id) VALUES ('public', 1, :bob)", bob=bob)
    assert change(page)[1]["record"]["title"] == "public"  # anon's: the published post only
    page.nothing()

    page.send("realtime:page", "access_token", {"access_token": ann_token}, "1")
    page.handled()  # a write made on the instant may still be judged with anon's rights
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'signed in')", ann=ann)
    database("INSERT INTO notes (user_id, body) VALUES (:bob, 'bob''s')", bob=bob)
    database("UPDATE notes SET body = 'edited' WHERE body = 'signed in'")
    database("DELETE FROM notes WHERE body = 'edited'")
    database("INSERT INTO posts (title, published, author_id) VALUES ('her draft', 0, :ann)", ann=ann)
    seen = [change(page)[1] for _ in range(4)]
    assert [(d["table"], d["type"]) for d in seen] == [
        ("notes", "INSERT"), ("notes", "UPDATE"), ("notes", "DELETE"), ("posts", "INSERT")
    ]  # fmt: skip
    assert seen[0]["record"]["body"] == "signed in" and seen[3]["record"]["title"] == "her draft"
    page.nothing()

    # Back to the anon key (the app signed out): her rows stop, the published ones go on.
    page.send("realtime:page", "access_token", {"access_token": server.anon}, "2")
    page.handled()
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'signed out')", ann=ann)
    database("INSERT INTO posts (title, published, author_id) VALUES ('news', 1, :bob)", bob=bob)
    assert change(page)[1]["record"]["title"] == "news"
    page.nothing()

    # Refused whatever the token: a table no token could read, and one not opted in.
    for table in ("vault", "plain"):
        refused = page.join(table, access_token=ann_token, postgres_changes=changes("v", ("*", table, {})))
        assert refused["status"] == "error"
        assert refused["response"]["reason"].startswith(
            "RealtimeDisabledForConfiguration: Unable to subscribe"
        )
    service = Client(server, key=server.service)
    assert service.join("vault", postgres_changes=changes("v", ("*", "vault", {})))["status"] == "ok"


@pytest.mark.alone  # waits on a token's real expiry: timed out once under the parallel run's load
def test_a_token_that_expires_mid_subscription_stops_its_changes(start_server, database):
    server = start_server(TABLES)
    token, ann = sign_up(server, "ann@example.com")
    claims = jwt.decode(token, options={"verify_signature": False})
    short = {key: claims[key] for key in ("sub", "session_id", "email", "aal", "amr") if key in claims}
    brief, expires = tokens.access_token(short, SECRET, 2)
    anna = Client(server)
    assert (
        anna.join("mine", access_token=brief, postgres_changes=changes("m", ("*", "notes", {})))["status"]
        == "ok"
    )
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'in time')", ann=ann)
    assert change(anna)[1]["record"]["body"] == "in time"
    system = anna.until("system", timeout=15)["payload"]
    assert system["status"] == "error" and system["message"].startswith("Token has expired")
    assert time.time() >= expires
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'too late')", ann=ann)
    anna.nothing(timeout=1)
    anna.send("realtime:mine", "access_token", {"access_token": token}, "1")
    anna.handled()
    database("INSERT INTO notes (user_id, body) VALUES (:ann, 'fresh')", ann=ann)
    assert change(anna)[1]["record"]["body"] == "fresh"


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_without_the_trigger_privilege_the_start_says_so_and_joins_are_refused(
    start_server, database, database_url, mariadb_server
):
    admin = sa.create_engine(mariadb_server)

    def mysql_admin(_, sql):
        with admin.begin() as connection:
            connection.exec_driver_sql(sql.replace("%", "%%"))

    url = sa.engine.make_url(database_url)
    name, user = url.database, f"rt_{url.database[-8:]}"
    mysql_admin(mariadb_server, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    mysql_admin(mariadb_server, f"GRANT ALL ON `{name}`.* TO '{user}'@'%'")
    mysql_admin(mariadb_server, f"REVOKE TRIGGER ON `{name}`.* FROM '{user}'@'%'")
    try:
        limited = url.set(username=user, password="pw").render_as_string(hide_password=False)
        server = start_server(TABLES, DATABASE_URL=limited)
        refusal = ("changes of table 'messages' are not captured", "TRIGGER privilege")
        log = server.wait_for_log(*refusal)
        assert all(text in log for text in refusal)
        reply = Client(server).join("db", postgres_changes=changes("db", ("*", "messages", {})))
        assert reply["status"] == "error" and "Unable to subscribe" in reply["response"]["reason"]
        assert requests.get(f"{server.base}/health", timeout=5).json() == {"status": "ok"}
    finally:
        mysql_admin(mariadb_server, f"DROP USER '{user}'@'%'")
        admin.dispose()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_columns_no_policy_looks_at_never_enter_the_log(start_server, database, database_url):
    database("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name VARCHAR(50), pin VARCHAR(10))")
    server = start_server('[tables.accounts]\nselect = "anon"\ncolumns = ["id", "name"]\nrealtime = true\n')
    watcher = Client(server)
    assert watcher.join("a", postgres_changes=changes("a", ("*", "accounts", {})))["status"] == "ok"
    database("INSERT INTO accounts (id, name, pin) VALUES (1, 'ann', '1234')")
    _, data = change(watcher)
    assert data["record"] == {"id": 1, "name": "ann"}
    engine = sa.create_engine(database_url)
    with engine.connect() as connection:
        logged = connection.execute(sa.text("SELECT new_row FROM minibase_realtime_changes")).scalars().all()
    engine.dispose()
    assert logged and all("1234" not in row and "pin" not in row for row in logged)


def bodies(client, count, quiet=1.5):
    """The bodies of the next `count` changes, then none for `quiet` seconds (none came twice)."""
    found = [change(client)[1]["record"]["body"] for _ in range(count)]
    client.nothing(timeout=quiet)
    return found


def test_a_commit_later_than_a_newer_one_is_delivered_once(start_server, database, database_url, backend):
    """A transaction writes, stays open 3 s while another writer commits, then commits: both
    changes arrive, each once, in the order they committed (on SQLite the other writer waits)."""
    server = start_server(TABLES)
    watcher = Client(server)
    assert watcher.join("db", postgres_changes=changes("db", ("*", "messages", {})))["status"] == "ok"
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as slow, slow.begin():
            slow.execute(sa.text("INSERT INTO messages (room, body) VALUES (1, 'late')"))
            other = threading.Thread(
                target=database, args=("INSERT INTO messages (room, body) VALUES (1, 'early')",)
            )
            other.start()
            if backend == "mysql":  # the newer id commits and is delivered while the older one is open
                assert bodies(watcher, 1, quiet=0.1) == ["early"]
            time.sleep(3)
        other.join()
    finally:
        engine.dispose()
    expected = ["late", "early"] if backend == "sqlite" else ["late"]
    assert bodies(watcher, len(expected)) == expected


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_transaction_open_when_the_service_starts_is_delivered_when_it_commits(
    start_server, database, database_url
):
    start_server(TABLES).process.kill()  # made the log's triggers
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as slow, slow.begin():
            slow.execute(sa.text("INSERT INTO messages (room, body) VALUES (1, 'open at the start')"))
            database("INSERT INTO messages (room, body) VALUES (1, 'committed before')")
            server = start_server(TABLES)
            watcher = Client(server)
            assert watcher.join("db", postgres_changes=changes("db", ("*", "messages", {})))["status"] == "ok"
        assert bodies(watcher, 1) == ["open at the start"]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_the_services_own_commit_wakes_the_feed_before_its_poll(start_server, database):
    """MariaDB tells no one of a commit: the feed polls the log. A write of the service itself (here
    through /rest/v1) is read at once, and with it what another program wrote before; the poll is
    made 30 s long, so only the wake can deliver them in time."""
    server = start_server(TABLES, prelude="import live.changes; live.changes.POLL_SECONDS = 30")
    watcher = Client(server)
    assert watcher.join("db", postgres_changes=changes("db", ("INSERT", "messages", {})))["status"] == "ok"
    assert watcher.until("system")["payload"]["message"] == "Subscribed to PostgreSQL"
    database("INSERT INTO messages (room, body) VALUES (1, 'by another program')")
    # Not waited for: the service's own background commits (its leases, its checks) wake the feed
    # too, so when this one is read is not the test's to know.
    started = time.monotonic()
    answer = requests.post(
        f"{server.base}/rest/v1/messages",
        json={"room": 1, "body": "through the API"},
        headers={"apikey": server.anon},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    assert [change(watcher, 5)[1]["record"]["body"] for _ in range(2)] == ["by another program",
                                                                          "through the API"]  # fmt: skip
    assert time.monotonic() - started < 2


@pytest.fixture
def redis():
    require(
        shutil.which("redis-server") or os.path.exists("/usr/bin/redis-server"),
        "redis-server",
        "redis-server",
    )
    server = Redis()
    yield server
    server.stop()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_commit_on_one_instance_wakes_the_others_feeds(start_server, database, redis):
    """Through Redis (the bus of broadcasts and presence), an instance that commits tells the others,
    whose polls are made 30 s long: the change reaches a socket of the other instance at once."""
    slow = "import live.changes; live.changes.POLL_SECONDS = 30"
    one = start_server(TABLES, prelude=slow, REALTIME_REDIS_URL=redis.url)
    two = start_server(TABLES, prelude=slow, REALTIME_REDIS_URL=redis.url)
    watcher = Client(two)
    assert watcher.join("db", postgres_changes=changes("db", ("INSERT", "messages", {})))["status"] == "ok"

    def insert(server, body):
        answer = requests.post(f"{server.base}/rest/v1/messages", json={"room": 2, "body": body},
                               headers={"apikey": server.anon}, timeout=10)  # fmt: skip
        assert answer.status_code == 201, answer.text
        started = time.monotonic()
        assert change(watcher, 10)[1]["record"]["body"] == body
        return time.monotonic() - started

    insert(two, "on instance two")  # its own commit: the feed has read the log and waits 30 s now
    assert insert(one, "on instance one") < 2
    watcher.nothing()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_rolled_back_ids_do_not_hold_later_changes_back(start_server, database, database_url):
    """Each rolled-back insert leaves a gap in the log's ids that is never filled: the change after
    it goes out without waiting for it. Past 32 gaps the oldest, here a transaction still open, are
    looked for less often, and found when it commits."""
    server = start_server(TABLES)
    watcher = Client(server)
    assert watcher.join("db", postgres_changes=changes("db", ("*", "messages", {})))["status"] == "ok"

    def gaps(numbers):
        for n in numbers:
            database.rolled_back(f"INSERT INTO messages (room, body) VALUES ({n}, 'rolled back')")
            database(f"INSERT INTO messages (room, body) VALUES ({n}, 'kept {n}')")
        return [f"kept {n}" for n in numbers]

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as slow, slow.begin():
            slow.execute(sa.text("INSERT INTO messages (room, body) VALUES (0, 'open')"))
            started = time.monotonic()
            written = gaps(range(5))
            assert bodies(watcher, 5, quiet=0.1) == written
            assert time.monotonic() - started < 2.5  # a second a gap would be 5 s
            written = gaps(range(5, 45))
            assert bodies(watcher, 40, quiet=0.1) == written
        assert bodies(watcher, 1) == ["open"]
    finally:
        engine.dispose()


def test_trimming_keeps_what_a_late_commit_and_the_next_id_need(app, database_url, backend):
    """The log keeps a change KEEP_SECONDS after its write, which is past the LATE_SECONDS a
    missing id is looked for, and always its newest row (an emptied MySQL 5.7 table restarted would
    give out ids again from 1). A transaction left open on a row of the log is not waited for."""
    engine = sa.create_engine(database_url)
    now = time.time()

    def logged(connection, age):
        connection.execute(
            sa.text(
                "INSERT INTO minibase_realtime_changes (table_name, operation, new_row, created_at) "
                "VALUES ('messages', 'INSERT', '{}', :at)"
            ),
            {"at": now - age},
        )

    try:
        with engine.begin() as connection:
            for age in (changelog.KEEP_SECONDS + 60, changelog.KEEP_SECONDS + 30):
                logged(connection, age)
            logged(connection, changelog.LATE_SECONDS + 30)  # a late commit's, written long before
            logged(connection, changelog.KEEP_SECONDS + 60)  # the newest, old as it is
        with engine.connect() as open_, open_.begin():
            if backend == "mysql":  # its row is locked until it ends; SQLite's writer would lock all
                logged(open_, changelog.KEEP_SECONDS + 90)
            started = time.monotonic()
            with app.app_context():
                changelog.trim()
            assert time.monotonic() - started < 2
        with engine.connect() as connection:
            left = connection.execute(sa.text("SELECT id FROM minibase_realtime_changes ORDER BY id"))
            assert left.scalars().all() == [3, 4] + ([5] if backend == "mysql" else [])  # 5 was open
    finally:
        engine.dispose()


JUDGED_ALONE = """
[tables.posts]
select = "anon"
insert = "anon"
realtime = true

[tables.posts.policies]
select = "{policy}"
"""
# A row policy that errs on one row only: on SQLite a title that is no regular expression; on
# MariaDB (whose REGEXP then only warns) a scalar subquery that finds two rows for that title.
ERRS_ON_A_ROW = {
    "sqlite": "title REGEXP title",
    "mysql": "COALESCE((SELECT 1 FROM plain WHERE body = title), 1) = 1",
}


def test_a_change_that_cannot_be_judged_holds_the_others_back_only_so_long(start_server, database, backend):
    """A batch whose judging fails is judged again for JUDGE_RETRY_SECONDS (60, 2 here), then each
    change alone: the one the row policy errs on is not delivered (the log names it), the others
    are, and the changes after them flow as before."""
    database("INSERT INTO plain (body) VALUES ('(unclosed'), ('(unclosed')")
    tables = JUDGED_ALONE.format(policy=ERRS_ON_A_ROW[backend])
    server = start_server(tables, prelude="import live.changes; live.changes.JUDGE_RETRY_SECONDS = 2")
    watcher = Client(server)
    assert watcher.join("db", postgres_changes=changes("db", ("INSERT", "posts", {})))["status"] == "ok"
    watcher.until("system")
    database("INSERT INTO posts (title, published) VALUES ('fine', 1)")
    assert change(watcher)[1]["record"]["title"] == "fine"  # judged at once
    started = time.monotonic()
    database("INSERT INTO posts (title, published) VALUES ('(unclosed', 1)")
    database("INSERT INTO posts (title, published) VALUES ('after it', 1)")
    _, data = change(watcher, timeout=20)
    assert data["record"]["title"] == "after it"  # the one before it was never delivered
    assert time.monotonic() - started > 1.5, server.log()  # judged again as a batch first, for 2 s
    assert "cannot be judged: not delivered" in server.wait_for_log("cannot be judged: not delivered")
    database("INSERT INTO posts (title, published) VALUES ('next', 1)")
    started = time.monotonic()
    assert change(watcher)[1]["record"]["title"] == "next"
    assert time.monotonic() - started < 1.5  # the retrying ended with the batch it held
    watcher.nothing()
