"""An existing users table made by another application (a PHP one, say): minibase works on it as
it is, verifies its hashes, and never alters it."""

import bcrypt
import pytest
from sqlalchemy import create_engine, inspect, text

from extensions import db
from models import USER_COLUMNS, users_table
from support import Api, assert_auth_error

LEGACY_DDL = {
    "sqlite": """
        CREATE TABLE {name} (
            user_id INTEGER PRIMARY KEY AUTOINCREMENT,
            email VARCHAR(255) NOT NULL UNIQUE,
            password VARCHAR(255) NOT NULL,
            username VARCHAR(50) NOT NULL,
            first_name VARCHAR(50) NOT NULL DEFAULT '',
            last_name VARCHAR(50),
            active TINYINT NOT NULL DEFAULT 1,
            joined DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            phone_number VARCHAR(20) NOT NULL DEFAULT '',
            role VARCHAR(20) NOT NULL DEFAULT 'member',
            avatar BLOB
        )""",
    "mysql": """
        CREATE TABLE {name} (
            user_id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
            email VARCHAR(255) NOT NULL UNIQUE,
            password CHAR(60) NOT NULL,
            username VARCHAR(50) NOT NULL,
            first_name VARCHAR(50) NOT NULL DEFAULT '',
            last_name VARCHAR(50) NULL,
            active TINYINT(1) NOT NULL DEFAULT 1,
            joined TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            phone_number VARCHAR(20) NOT NULL DEFAULT '',
            role ENUM('member','admin') NOT NULL DEFAULT 'member',
            avatar BLOB NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
}


def php_hash(password, cost=10, prefix="2y"):
    """What PHP's password_hash() stores: bcrypt with the $2y$ prefix."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()
    return f"${prefix}${hashed[4:]}"


@pytest.fixture
def legacy_db(database_url, backend):
    """A database where another application made `members` and already has users in it."""
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text(LEGACY_DDL[backend].format(name="members")))
        rows = [
            ("Legacy@Example.com", php_hash("php-password"), "legacy", "Leg", 1),
            ("old@example.com", php_hash("old-password", prefix="2a"), "old", "Old", 1),
            ("md5@example.com", "5f4dcc3b5aa765d61d8327deb882cf99", "md5", "Md", 1),
            ("gone@example.com", php_hash("gone-password"), "gone", "Gone", 0),
            ("cheap@example.com", php_hash("cheap-password", cost=4), "cheap", "Cheap", 1),
        ]
        for email, password, username, first, active in rows:
            connection.execute(
                text(
                    "INSERT INTO members (email, password, username, first_name, active) "
                    "VALUES (:e, :p, :u, :f, :a)"
                ),
                {"e": email, "p": password, "u": username, "f": first, "a": active},
            )
    yield engine
    engine.dispose()


def schema(engine):
    inspector = inspect(engine)
    return [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns("members")]


@pytest.fixture
def legacy(legacy_db, make_app, anon_key):
    before = schema(legacy_db)
    app = make_app(USERS_TABLE="members")
    yield Api(app, anon_key)
    assert schema(legacy_db) == before, "minibase altered the other application's table"


def test_php_2y_and_2a_hashes_verify(legacy):
    assert legacy.sign_in("legacy@example.com", "php-password").status_code == 200
    assert legacy.sign_in("old@example.com", "old-password").status_code == 200
    assert_auth_error(legacy.sign_in("legacy@example.com", "wrong-password"), 400, "invalid_credentials")


def test_mixed_case_stored_email_signs_in(legacy):
    response = legacy.sign_in("LEGACY@example.COM", "php-password")
    assert response.status_code == 200
    assert response.json["user"]["user_metadata"]["username"] == "legacy"


def test_unreadable_hash_is_just_a_failed_sign_in(legacy):
    assert_auth_error(legacy.sign_in("md5@example.com", "password"), 400, "invalid_credentials")


def test_inactive_legacy_user(legacy):
    assert_auth_error(legacy.sign_in("gone@example.com", "gone-password"), 400, "user_inactive")


def test_sign_up_fills_what_the_table_requires(legacy, legacy_db):
    session = legacy.sign_up("new@example.com", "new-password", first_name="New")
    assert session["user"]["id"] == 6
    with legacy_db.connect() as connection:
        row = connection.execute(text("SELECT * FROM members WHERE email = 'new@example.com'")).one()
    assert row.username == "" and row.first_name == "New" and row.role == "member"
    assert row.phone_number == "" and row.active == 1 and row.password.startswith("$2b$")
    assert legacy.sign_in("new@example.com", "new-password").status_code == 200


def test_cheap_hash_is_rehashed_at_sign_in_keeping_its_family(legacy_db, make_app, anon_key):
    api = Api(make_app(USERS_TABLE="members", BCRYPT_ROUNDS=5), anon_key)
    assert api.sign_in("cheap@example.com", "cheap-password").status_code == 200
    with legacy_db.connect() as connection:
        stored = connection.execute(
            text("SELECT password FROM members WHERE email = 'cheap@example.com'")
        ).scalar()
    assert stored.startswith("$2y$05$")
    assert bcrypt.checkpw(b"cheap-password", stored.encode())
    assert api.sign_in("cheap@example.com", "cheap-password").status_code == 200


def test_password_change_keeps_the_php_family(legacy):
    token = legacy.sign_in("legacy@example.com", "php-password").json["access_token"]
    response = legacy.patch("/auth/v1/user", token=token, json={"password": "brand-new-pw"})
    assert response.status_code == 200
    with legacy.app.app_context():
        users = users_table()
        stored = db.session.execute(
            users.select().with_only_columns(users.c.password).where(users.c.user_id == 1)
        ).scalar()
    assert stored.startswith("$2y$")
    assert legacy.sign_in("legacy@example.com", "brand-new-pw").status_code == 200


def test_profile_update_on_a_legacy_row(legacy):
    token = legacy.sign_in("legacy@example.com", "php-password").json["access_token"]
    response = legacy.patch(
        "/auth/v1/user", token=token, json={"last_name": "Lee", "about": "from PHP", "username": None}
    )
    assert response.status_code == 200, response.json
    meta = response.json["user_metadata"]
    assert meta["last_name"] == "Lee" and meta["about"] == "from PHP"
    assert meta["username"] == ""  # NOT NULL without a default: stored empty, not refused


def test_a_users_table_without_the_expected_columns_refuses_to_start(database_url, make_app):
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE people (user_id INTEGER PRIMARY KEY, email VARCHAR(255))"))
    engine.dispose()
    with pytest.raises(RuntimeError, match="password"):
        make_app(USERS_TABLE="people")


def test_fresh_install_creates_the_users_table(app):
    with app.app_context():
        columns = {c.name for c in users_table().c}
    assert set(USER_COLUMNS) <= columns


def test_accent_and_case_variants_of_an_address_share_its_count_and_never_sign_in(
    legacy_db, make_app, anon_key
):
    """MariaDB's usual collation finds légacy@ for legacy@: the address must still match exactly, and
    the count of failures is the account's, whatever variant was typed."""
    api = Api(make_app(RATE_LIMITS=True, USERS_TABLE="members"), anon_key)
    assert_auth_error(api.sign_in("légacy@example.com", "php-password"), 400, "invalid_credentials")
    for _ in range(9):
        assert_auth_error(api.sign_in("legacy@example.com", "wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(api.sign_in("LEGACY@example.com", "wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(api.sign_in("legacy@example.com", "php-password"), 429, "over_request_rate_limit")


def test_an_unknown_address_costs_the_bcrypt_work_of_the_stored_hashes(legacy_db, make_app, anon_key):
    """The stored hashes cost 10 while new ones cost 4: an unknown address is checked against a hash
    of cost 10 too, or its quick answer would tell that the address has no account."""
    app = make_app(USERS_TABLE="members")
    api = Api(app, anon_key)
    assert_auth_error(api.sign_in("nobody@example.com", "some-password"), 400, "invalid_credentials")
    with app.app_context():
        from auth.passwords import hash_cost
        from extensions import state

        assert state().dummy_cost == 10 and hash_cost(state().dummy_hash) == 10


@pytest.mark.parametrize("stored", ["unusable", "5f4dcc3b5aa765d61d8327deb882cf99", ""])
def test_a_hash_no_password_matches_costs_the_bcrypt_work_of_a_wrong_password(
    app, anon_key, monkeypatch, stored
):
    """A user made by a provider has a hash no password matches (and another application's rows may
    hold an MD5 digest or nothing): bcrypt refuses such a value at once, so the sign-in checks the
    password against the dummy hash instead, one bcrypt verify like any wrong password, and answers
    exactly what an unknown address gets."""
    from auth import accounts, signins
    from auth.passwords import unusable_hash
    from extensions import state

    api = Api(app, anon_key)
    user_id = api.sign_up("made@example.com")["user"]["id"]
    with app.app_context():
        value = unusable_hash() if stored == "unusable" else stored
        accounts.set_password_hash(user_id, value)
        db.session.commit()
    checked = []

    def verify(password, hashed):
        checked.append(hashed)
        return real(password, hashed)

    real = signins.verify_password
    monkeypatch.setattr(signins, "verify_password", verify)
    refused = api.sign_in("made@example.com", value or "secret-pw")
    unknown = api.sign_in("nobody@example.com", "secret-pw")
    assert_auth_error(refused, 400, "invalid_credentials")
    assert refused.json == unknown.json
    with app.app_context():
        dummy = state().dummy_hash
    assert checked == [dummy, dummy]  # one real bcrypt verify each, never against the stored value
    # A password equal to the dummy hash's own does not get in either.
    assert_auth_error(api.sign_in("made@example.com", "minibase-no-such-user"), 400, "invalid_credentials")
