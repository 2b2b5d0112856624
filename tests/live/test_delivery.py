"""Who sees what when many changes and many subscribers are judged at once: the changes of one
transaction are read in one batch, and the row policy is run for every row and every subscriber in
one statement; each subscriber must still get exactly the rows its own identity may select."""

import pytest
import sqlalchemy as sa
from phoenix import Client, change, sign_up

TABLES = """
[tables.posts]
select = "anon"
columns = ["id", "title", "published", "author_id"]
realtime = true

[tables.posts.policies]
select = "published = 1 OR author_id = :uid OR title = :app_metadata.team"
"""


@pytest.fixture
def posts(database_url, backend):
    auto = "AUTO_INCREMENT" if backend == "mysql" else "AUTOINCREMENT"
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                f"CREATE TABLE posts (id INTEGER PRIMARY KEY {auto}, title VARCHAR(200), "
                "published INTEGER NOT NULL, author_id INTEGER, secret VARCHAR(200))"
            )
        )
    yield engine
    engine.dispose()


def test_one_batch_of_changes_is_judged_for_each_subscriber_apart(start_server, posts):
    server = start_server(TABLES)
    users = [sign_up(server, f"user{n}@example.com") for n in range(3)]
    watching = [{"event": "*", "schema": "public", "table": "posts"}]
    clients = []
    for n, (token, _) in enumerate(users):
        client = Client(server, "2.0.0" if n % 2 else "1.0.0")
        assert client.join("posts", access_token=token, postgres_changes=watching)["status"] == "ok"
        clients.append(client)
    stranger = Client(server)
    assert stranger.join("posts", postgres_changes=watching)["status"] == "ok"

    ids = [user_id for _, user_id in users]
    rows = [("a draft", 0, ids[0]), ("b draft", 0, ids[1]), ("public", 1, ids[2]), ("c draft", 0, ids[2]),
            ("outsider draft", 0, 999999), ("b second", 0, ids[1])]  # fmt: skip
    with posts.begin() as connection:  # one transaction: the feed reads its changes in one batch
        for title, published, author in rows:
            connection.execute(
                sa.text("INSERT INTO posts (title, published, author_id, secret) VALUES (:t, :p, :a, 's')"),
                {"t": title, "p": published, "a": author},
            )
    expected = [["a draft", "public"], ["b draft", "public", "b second"], ["public", "c draft"]]
    for client, titles in zip(clients, expected, strict=True):
        seen = [change(client)[1]["record"] for _ in titles]
        assert [record["title"] for record in seen] == titles
        assert all("secret" not in record for record in seen)
        client.nothing()
    assert change(stranger)[1]["record"]["title"] == "public"
    stranger.nothing()

    # A DELETE is judged on the row as it was, for each of them.
    with posts.begin() as connection:
        connection.execute(sa.text("DELETE FROM posts WHERE title IN ('b draft', 'public')"))
    assert [change(clients[1])[1]["old_record"] for _ in range(2)] == [{"id": 2}, {"id": 3}]
    for client in (clients[0], clients[2], stranger):
        assert change(client)[1]["old_record"] == {"id": 3}
        client.nothing()
    clients[1].nothing()


MEMBERS = """
[tables.posts]
select = "authenticated"
columns = ["id", "title"]
realtime = true

[tables.posts.policies]
select = "EXISTS (SELECT 1 FROM members m WHERE m.user_id = :uid)"
"""


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_change_the_database_fails_to_judge_is_judged_again_not_lost(start_server, posts, database_url):
    # The row policy reads another table; while another program holds a lock on it, judging the change
    # fails (lock wait timeout). The change has already been read from the log: it must be kept and
    # delivered once the lock is gone, and only once.
    with posts.begin() as connection:
        connection.execute(sa.text("CREATE TABLE members (user_id INTEGER PRIMARY KEY)"))
    server = start_server(MEMBERS, DB_TIMEOUT="3")
    token, user_id = sign_up(server, "ann@example.com")
    with posts.begin() as connection:
        connection.execute(sa.text("INSERT INTO members (user_id) VALUES (:u)"), {"u": user_id})
    ann = Client(server)
    watching = [{"event": "INSERT", "schema": "public", "table": "posts"}]
    assert ann.join("posts", access_token=token, postgres_changes=watching)["status"] == "ok"

    locker = posts.connect()
    try:
        locker.exec_driver_sql("LOCK TABLES members WRITE")
        with posts.begin() as connection:
            connection.execute(sa.text("INSERT INTO posts (title, published) VALUES ('while locked', 0)"))
        failed = "realtime: reading the change log failed"
        assert failed in server.wait_for_log(
            failed, timeout=20
        )  # the judging waited on the lock, then failed
    finally:
        locker.exec_driver_sql("UNLOCK TABLES")
        locker.close()
    assert change(ann)[1]["record"] == {"id": 1, "title": "while locked"}
    with posts.begin() as connection:
        connection.execute(sa.text("INSERT INTO posts (title, published) VALUES ('after', 0)"))
    assert change(ann)[1]["record"]["title"] == "after"  # the first once, then the next
