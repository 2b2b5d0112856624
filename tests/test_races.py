"""Requests that race, over a real waitress server and real threads: nothing acknowledged is lost,
no 5xx, on both databases."""

import logging
import threading

import pytest
import requests
from sqlalchemy import create_engine, text

from support import Api, eventually, serve_app

REFRESH = "/auth/v1/token?grant_type=refresh_token"
# A users table as another application may have made it: email indexed, but not unique.
NO_UNIQUE_EMAIL = {
    "sqlite": (
        "CREATE TABLE members (user_id INTEGER PRIMARY KEY AUTOINCREMENT, email VARCHAR(255) NOT NULL, "
        "password VARCHAR(255) NOT NULL, username VARCHAR(50), first_name VARCHAR(50), "
        "last_name VARCHAR(50), active SMALLINT NOT NULL DEFAULT 1, "
        "joined DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        "CREATE INDEX members_email ON members (email)",
    ),
    "mysql": (
        "CREATE TABLE members (user_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "email VARCHAR(255) NOT NULL, password VARCHAR(255) NOT NULL, username VARCHAR(50), "
        "first_name VARCHAR(50), last_name VARCHAR(50), active SMALLINT NOT NULL DEFAULT 1, "
        "joined DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, INDEX members_email (email)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ),
}


def at_once(calls):
    """Run the callables together, released by one barrier; their results in order."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(index, call):
        barrier.wait()
        results[index] = call()

    threads = [threading.Thread(target=run, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_concurrent_metadata_merges_keep_every_key(app, anon_key):
    api = Api(app, anon_key)
    token = api.sign_up()["access_token"]
    base, stop = serve_app(app)
    headers = {"apikey": anon_key, "Authorization": f"Bearer {token}"}
    try:
        statuses = at_once(
            [
                lambda n=n: (
                    requests.patch(
                        f"{base}/auth/v1/user", json={"data": {f"key{n}": n}}, headers=headers, timeout=30
                    ).status_code
                )
                for n in range(12)
            ]
        )
    finally:
        stop()
    assert statuses == [200] * 12
    metadata = api.get("/auth/v1/user", token=token).json["user_metadata"]
    assert {f"key{n}": n for n in range(12)}.items() <= metadata.items(), metadata


def test_refreshes_racing_logouts_get_answers_not_5xx(app, anon_key):
    """Each session refreshed and logged out at the same moment, forty at a time, three times: the two
    take the same locks, which once deadlocked on MariaDB and answered 503."""
    api = Api(app, anon_key)
    api.sign_up()
    base, stop = serve_app(app, threads=16)

    def refresh(session):
        return requests.post(
            base + REFRESH,
            json={"refresh_token": session["refresh_token"]},
            headers={"apikey": anon_key},
            timeout=30,
        )

    def logout(session):
        return requests.post(
            f"{base}/auth/v1/logout?scope=local",
            headers={"apikey": anon_key, "Authorization": f"Bearer {session['access_token']}"},
            timeout=30,
        )

    try:
        for _ in range(3):
            sessions = [api.sign_in().json for _ in range(40)]
            calls = [lambda s=s: refresh(s) for s in sessions] + [lambda s=s: logout(s) for s in sessions]
            responses = at_once(calls)
            refreshed, logged_out = responses[: len(sessions)], responses[len(sessions) :]
            assert all(r.status_code in (200, 400) for r in refreshed), [r.text for r in refreshed]
            assert all(
                r.json()["error_code"] == "refresh_token_not_found" for r in refreshed if r.status_code == 400
            )
            assert all(r.status_code in (204, 401) for r in logged_out), [r.text for r in logged_out]
            # Every session is gone in the end: a refresh that won its race was logged out right after.
            for session in sessions:
                assert refresh_after(api, session) == 400
    finally:
        stop()


def refresh_after(api, session):
    return api.post(REFRESH, json={"refresh_token": session["refresh_token"]}).status_code


@pytest.fixture
def members_without_unique_email(database_url, backend):
    engine = create_engine(database_url)
    with engine.begin() as connection:
        for statement in NO_UNIQUE_EMAIL[backend]:
            connection.execute(text(statement))
    yield engine
    engine.dispose()


def test_parallel_sign_ups_of_one_address_make_one_user_without_a_unique_index(
    members_without_unique_email, make_app, anon_key, caplog
):
    app = make_app(USERS_TABLE="members")
    assert "no unique index on email" in caplog.text
    base, stop = serve_app(app)
    try:
        statuses = at_once(
            [
                lambda: (
                    requests.post(
                        f"{base}/auth/v1/signup",
                        json={"email": "twin@example.com", "password": "secret-pw"},
                        headers={"apikey": anon_key},
                        timeout=60,
                    ).status_code
                )
                for _ in range(20)
            ]
        )
    finally:
        stop()
    assert sorted(statuses) == [200] + [422] * 19, statuses
    with members_without_unique_email.connect() as connection:
        count = connection.execute(text("SELECT COUNT(*) FROM members WHERE email = 'twin@example.com'"))
        assert count.scalar() == 1


ITEMS = (
    "CREATE TABLE items (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL, "
    "n INT NOT NULL DEFAULT 0, UNIQUE KEY items_name (name)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
OPEN_ITEMS = '[tables.items]\nselect = "anon"\ninsert = "anon"\nupdate = "anon"\ndelete = "anon"\n'


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])
def test_an_upsert_whose_savepoint_a_deadlock_took_runs_again(
    make_app, database_url, anon_key, tmp_path, caplog
):
    """MariaDB resolves a deadlock by rolling back the victim's whole transaction, its savepoints
    with it: an upsert of two rows, its first merged, is made the victim of a real deadlock while
    its second is inserted in a savepoint, whose ROLLBACK TO SAVEPOINT then meets error 1305. The
    request runs again as a whole: a 2xx, never the 400 of a query the database refused."""
    caplog.set_level(logging.INFO, "minibase")
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text(ITEMS))
        connection.execute(text("CREATE TABLE ballast (n INT) ENGINE=InnoDB"))
        connection.execute(text("INSERT INTO items (name) VALUES ('a'), ('z')"))  # 'k' falls in their gap
    (tmp_path / "tables.toml").write_text(OPEN_ITEMS)
    api = Api(make_app(TABLES_CONFIG=str(tmp_path / "tables.toml")), anon_key)
    assert api.get("/rest/v1/items").status_code == 200  # reflected: the upsert goes straight to its rows
    other = engine.connect()
    try:
        other.execute(text("INSERT INTO ballast VALUES " + ",".join(["(1)"] * 200)))  # the heavier side
        other.execute(text("SELECT id FROM items WHERE name = 'k' FOR UPDATE")).all()  # the gap's lock
        answered = []
        rows = [{"name": "a", "n": 5}, {"name": "k", "n": 1}]
        prefer = {"Prefer": "resolution=merge-duplicates,return=representation"}
        upsert = threading.Thread(
            target=lambda: answered.append(
                api.post("/rest/v1/items?on_conflict=name", json=rows, headers=prefer)
            )
        )
        upsert.start()
        with engine.connect() as watch:
            # The upsert's INSERT of 'k' waits for the gap this transaction locked (MariaDB does not
            # always show it as a LOCK WAIT in INNODB_TRX: the statement running is what is certain).
            waiting = (
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                " WHERE INFO LIKE 'INSERT INTO items%' AND STATE = 'Update'"
            )
            # a loaded machine: the wait itself is bounded by the server
            eventually(lambda: not upsert.is_alive() or watch.execute(text(waiting)).scalar(), 60, 0.01,
                       "the upsert waiting for the lock")  # fmt: skip
            assert upsert.is_alive(), "the upsert ended without waiting for the lock"
        # The upsert holds row 'a' (merged) and waits to insert 'k': asking for 'a' closes the circle.
        other.execute(text("SELECT id FROM items WHERE name = 'a' FOR UPDATE")).all()
        other.commit()
        upsert.join(timeout=30)
    finally:
        other.close()
        engine.dispose()
    (response,) = answered
    assert response.status_code in (200, 201), response.get_json()
    assert [(row["name"], row["n"]) for row in response.get_json()] == [("a", 5), ("k", 1)]
    assert "OperationalError 1305, trying again" in caplog.text, caplog.text
