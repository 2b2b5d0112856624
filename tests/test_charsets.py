"""On a MySQL/MariaDB database whose default charset is latin1 (old shared hosts), the service's own
tables, and the users table it creates, still hold any text: non-Latin names round-trip."""

import uuid

import pymysql
import pytest
from sqlalchemy import text

from auth import tokens
from extensions import db
from support import Api


def admin_sql(server, sql):
    connection = pymysql.connect(
        host=server.host, port=server.port or 3306, user=server.username, password=server.password or ""
    )
    with connection, connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.fixture
def latin1_database(mariadb_server):
    name = f"minibase_latin1_{uuid.uuid4().hex[:12]}"
    admin_sql(mariadb_server, f"CREATE DATABASE {name} CHARACTER SET latin1 COLLATE latin1_swedish_ci")
    yield mariadb_server.set(database=name).render_as_string(hide_password=False)
    admin_sql(mariadb_server, f"DROP DATABASE IF EXISTS {name}")


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_latin1_database_still_stores_any_name(latin1_database, make_app, anon_key):
    app = make_app(DATABASE_URL=latin1_database)
    api = Api(app, tokens.api_key("anon", app.config["JWT_SECRET"]))
    session = api.sign_up(username="Jürgen", first_name="Олена", last_name="山田 🙂", about="naïve ☕")
    user = api.get("/auth/v1/user", token=session["access_token"]).json
    assert user["user_metadata"]["first_name"] == "Олена" and user["user_metadata"]["about"] == "naïve ☕"
    with app.app_context():
        collations = dict(
            db.session.execute(
                text(
                    "SELECT table_name, table_collation FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name IN ('users', 'minibase_sessions', "
                    "'minibase_refresh_tokens', 'minibase_profiles', 'minibase_signup_locks')"
                )
            ).all()
        )
    assert len(collations) == 5 and all(c.startswith("utf8mb4") for c in collations.values()), collations
    assert collations["minibase_refresh_tokens"] == "utf8mb4_bin"
