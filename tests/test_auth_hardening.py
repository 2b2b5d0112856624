"""Input that once made the auth API answer 5xx: JSON that is not strictly JSON, NUL characters,
values longer than their column, on both databases. Each is a 400 and stores nothing."""

import pytest

from support import Api, assert_auth_error

BODIES = {
    "NaN": b'{"email": "a@example.com", "password": NaN}',
    "Infinity": b'{"email": "a@example.com", "password": "secret-pw", "data": {"n": -Infinity}}',
    "lone surrogate": b'{"email": "a@example.com", "password": "secret-pw", "data": {"x": "\\ud800"}}',
    "deep": b'{"email": "a@example.com", "password": "secret-pw", "data": '
    + b'{"a": ' * 40
    + b"1"
    + b"}" * 40
    + b"}",
    "very deep": b"[" * 100_000 + b"]" * 100_000,
    "latin-1 bytes": '{"email": "a@example.com", "password": "sécret-pw"}'.encode("latin-1"),
}


@pytest.mark.parametrize("name", BODIES)
def test_bodies_that_are_not_strict_json_are_bad_json(api, name):
    response = api.post("/auth/v1/signup", data=BODIES[name], headers={"Content-Type": "application/json"})
    assert_auth_error(response, 400, "bad_json")
    assert_auth_error(api.sign_in("a@example.com", "secret-pw"), 400, "invalid_credentials")


def test_a_nul_in_a_password_is_refused_not_a_500(api):
    response = api.post("/auth/v1/signup", json={"email": "nul@example.com", "password": "secret\0pw"})
    assert "NUL" in assert_auth_error(response, 400, "validation_failed")["msg"]
    session = api.sign_up()
    response = api.put("/auth/v1/user", token=session["access_token"], json={"password": "new\0password"})
    assert_auth_error(response, 400, "validation_failed")
    assert_auth_error(api.sign_in("ann@example.com", "secret\0pw"), 400, "validation_failed")


@pytest.mark.parametrize("field", ["username", "first_name", "last_name"])
def test_a_value_longer_than_its_column_is_a_400_naming_it(api, field):
    response = api.post(
        "/auth/v1/signup",
        json={"email": "long@example.com", "password": "secret-pw", "data": {field: "x" * 10_000}},
    )
    assert field in assert_auth_error(response, 400, "validation_failed")["msg"]
    session = api.sign_up()
    response = api.put("/auth/v1/user", token=session["access_token"], json={field: "y" * 10_000})
    assert field in assert_auth_error(response, 400, "validation_failed")["msg"]
    user = api.get("/auth/v1/user", token=session["access_token"]).json
    assert field not in user["user_metadata"]  # nothing was stored (and no null is invented)


def test_an_email_longer_than_its_column_and_a_huge_about(api):
    response = api.post(
        "/auth/v1/signup", json={"email": "x" * 300 + "@example.com", "password": "secret-pw"}
    )
    assert_auth_error(response, 400, "validation_failed")
    session = api.sign_up()
    response = api.put("/auth/v1/user", token=session["access_token"], json={"about": "é" * 40_000})
    assert "about" in assert_auth_error(response, 400, "validation_failed")["msg"]
    ok = api.put("/auth/v1/user", token=session["access_token"], json={"about": "é" * 30_000})
    assert ok.status_code == 200 and ok.json["user_metadata"]["about"] == "é" * 30_000


def test_non_latin_names_round_trip(api):
    session = api.sign_up(username="Jürgen", first_name="Олена", last_name="山田 🙂")
    user = api.get("/auth/v1/user", token=session["access_token"]).json
    assert user["user_metadata"]["first_name"] == "Олена"
    assert user["user_metadata"]["last_name"] == "山田 🙂"


@pytest.mark.parametrize("depth", [29, 30, 31, 32])
def test_metadata_nested_to_the_limit_is_stored_or_refused_never_a_500(api, depth):
    """`data` nested about 31 levels once passed the parser and failed in MariaDB's JSON check."""
    nested = 1
    for _ in range(depth):
        nested = {"a": nested}
    response = api.post(
        "/auth/v1/signup", json={"email": "deep@example.com", "password": "pw-secret", "data": nested}
    )
    if depth + 1 <= 32:
        assert response.status_code == 200, response.json
        assert response.json["user"]["user_metadata"]["a"] == nested["a"]
    else:
        assert_auth_error(response, 400, "bad_json")


# `1e999` is valid JSON that Python reads as infinity: it was stored as `Infinity` on SQLite (and then
# every session, token and admin listing carrying it was invalid JSON) and was a 503 on MariaDB.
NEW = '"email": "new@example.com", "password": "secret-pw", '
ROUTES = [  # (who sends it, method, path, body)
    ("anon", "POST", "/auth/v1/signup", '{' + NEW + '"data": {"n": 1e999}}'),
    ("anon", "POST", "/auth/v1/signup", '{' + NEW + '"data": {"a": [1, {"b": -1e999}]}}'),
    ("anon", "POST", "/auth/v1/signup", '{' + NEW + '"data": {"n": 1E400}}'),
    ("user", "PUT", "/auth/v1/user", '{"data": {"n": 1e999}}'),
    ("user", "PATCH", "/auth/v1/user", '{"first_name": "Ann", "data": {"n": 1e999}}'),
    ("anon", "POST", "/auth/v1/otp", '{"email": "new@example.com", "data": {"n": 1e999}}'),
    ("service", "POST", "/auth/v1/admin/users", '{' + NEW + '"user_metadata": {"n": 1e999}}'),
    ("service", "POST", "/auth/v1/admin/users", '{' + NEW + '"app_metadata": {"n": 1e999}}'),
    ("service", "PUT", "/auth/v1/admin/users/1", '{"user_metadata": {"n": 1e999}}'),
    ("service", "PUT", "/auth/v1/admin/users/1", '{"app_metadata": {"n": 1e999}}'),
    ("service", "POST", "/auth/v1/invite", '{"email": "new@example.com", "data": {"n": 1e999}}'),
    ("service", "POST", "/auth/v1/admin/generate_link", '{"type":"signup", ' + NEW + '"data": {"n": 1e999}}'),
]  # fmt: skip


@pytest.mark.parametrize(("who", "method", "path", "body"), ROUTES)
def test_a_number_too_large_for_a_double_is_bad_json_and_stores_nothing(
    api, service_key, who, method, path, body
):
    session = api.sign_up()
    admin = Api(api.app, service_key)
    token = session["access_token"] if who == "user" else None
    client = admin if who == "service" else api
    response = client.request(
        method, path, token=token, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    assert_auth_error(response, 400, "bad_json")
    # Nothing was stored: no new user, Ann's metadata as it was, and every answer still strict JSON.
    listing = admin.get("/auth/v1/admin/users")
    assert listing.status_code == 200 and "Infinity" not in listing.get_data(as_text=True)
    assert [user["email"] for user in listing.json["users"]] == ["ann@example.com"]
    user = api.get("/auth/v1/user", token=session["access_token"]).json
    assert "n" not in user["user_metadata"] and "n" not in user["app_metadata"]
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert refreshed.status_code == 200 and "Infinity" not in refreshed.get_data(as_text=True)


def test_the_largest_finite_numbers_are_still_stored(api):
    session = api.sign_up(big=1.7976931348623157e308, small=-1e-999, whole=10**30)
    user = api.get("/auth/v1/user", token=session["access_token"]).json
    assert user["user_metadata"]["big"] == 1.7976931348623157e308
    assert user["user_metadata"]["small"] == 0 and user["user_metadata"]["whole"] == 10**30


# A users table with a rule of the application's own: a CHECK on the username.
CHECKED_MEMBERS = {
    "sqlite": "CREATE TABLE members (user_id INTEGER PRIMARY KEY AUTOINCREMENT, email VARCHAR(255) NOT NULL "
    "UNIQUE, password VARCHAR(255) NOT NULL, username VARCHAR(50) CHECK (length(username) >= 3), "
    "first_name VARCHAR(50), last_name VARCHAR(50), active SMALLINT NOT NULL DEFAULT 1, "
    "joined DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    "mysql": "CREATE TABLE members (user_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, email VARCHAR(255) "
    "NOT NULL UNIQUE, password VARCHAR(255) NOT NULL, "
    "username VARCHAR(50) CHECK (char_length(username) >= 3), "
    "first_name VARCHAR(50), last_name VARCHAR(50), active SMALLINT NOT NULL DEFAULT 1, "
    "joined DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
}


def test_a_value_the_users_tables_own_check_refuses_is_a_400(make_app, database_url, backend, anon_key):
    """It was a 503 "database not answering" on MariaDB (error 4025) and a 422 user_already_exists on
    SQLite (an IntegrityError taken for a taken address)."""
    import sqlalchemy as sa

    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text(CHECKED_MEMBERS[backend]))
    engine.dispose()
    api = Api(make_app(USERS_TABLE="members"), anon_key)
    body = {"email": "ab@example.com", "password": "secret-pw", "data": {"username": "ab"}}
    assert_auth_error(api.post("/auth/v1/signup", json=body), 400, "validation_failed")
    assert_auth_error(api.sign_in("ab@example.com"), 400, "invalid_credentials")
    session = api.sign_up(username="abc")
    refused = api.put("/auth/v1/user", token=session["access_token"], json={"username": "x"})
    assert_auth_error(refused, 400, "validation_failed")
    assert api.get("/auth/v1/user", token=session["access_token"]).json["user_metadata"]["username"] == "abc"
