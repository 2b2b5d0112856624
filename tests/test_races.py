"""Requests that race, over a real waitress server and real threads: nothing acknowledged is lost,
no 5xx, on both databases."""

import threading

import pytest
import requests
from sqlalchemy import create_engine, text

from support import Api, serve_app

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
