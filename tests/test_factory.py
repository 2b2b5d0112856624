"""The factory, configuration, migrations, the command line, health, CORS and logs."""

import dataclasses
import json
import logging
import os
import stat
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from decimal import Decimal
from inspect import getsource as inspect_source

import jwt
import pytest
from sqlalchemy import create_engine, inspect, text
from werkzeug.routing import Map, Rule

import app as app_module
import config
import variables
from app import create_app
from auth import tokens
from database.migration_lock import migration_lock
from extensions import db
from models import users_table
from support import SECRET, Api, assert_auth_error, assert_rest_error

ROOT = config.ROOT


def test_defaults_are_spec_section_1():
    settings = config.from_environment({})
    assert settings["DATABASE_URL"] == "sqlite:///instance/minibase.db"
    assert settings["JWT_EXPIRY"] == 3600 and settings["REFRESH_TOKEN_EXPIRY"] == 2592000
    assert settings["REFRESH_TOKEN_REUSE_INTERVAL"] == 10 and settings["BCRYPT_ROUNDS"] == 10
    assert settings["USERS_TABLE"] == "users" and settings["MAX_ROWS"] == 1000
    assert settings["DISABLE_SIGNUP"] is False and settings["RATE_LIMITS"] is True
    assert settings["RATE_LIMIT_STORAGE_URI"] == "memory://" and settings["CORS_ORIGINS"] == "*"
    assert settings["AUTO_MIGRATE"] is True
    assert (settings["HOST"], settings["PORT"], settings["THREADS"]) == ("127.0.0.1", 8000, 8)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JWT_EXPIRY", "soon"),
        ("PORT", "-1"),
        ("DISABLE_SIGNUP", "maybe"),
        ("BCRYPT_ROUNDS", "2"),
        ("BCRYPT_ROUNDS", "32"),  # bcrypt refuses it: every sign-up would fail
    ],
)
def test_bad_settings_refuse_to_start_naming_the_variable(variable, value):
    with pytest.raises(variables.ConfigError, match=variable):
        config.from_environment({variable: value})


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"EXTERNAL_GITHUB_ENABLED": True}, "EXTERNAL_GITHUB_CLIENT_ID must be set"),
        ({"EXTERNAL_GOOGLE_ENABLED": True, "EXTERNAL_GOOGLE_CLIENT_ID": " , "}, "EXTERNAL_GOOGLE_CLIENT_ID"),
        ({"EMAIL_TEMPLATES": "/nonexistent/templates"}, "EMAIL_TEMPLATES must be a folder"),
    ],
)
def test_settings_that_cannot_work_together_refuse_to_start(database_url, settings, said):
    with pytest.raises(variables.ConfigError, match=said):
        create_app({"DATABASE_URL": database_url, "JWT_SECRET": "x" * 40, **settings})


@pytest.mark.parametrize(
    ("template", "said"),
    [("Hello {{ nobody }}", "recovery.txt: 'nobody' is undefined"), ("{% if %}", "recovery.txt: ")],
)
def test_a_mail_template_that_cannot_render_stops_the_start(database_url, tmp_path, template, said):
    (tmp_path / "recovery.txt").write_text(template)
    with pytest.raises(variables.ConfigError, match=said):
        create_app({"DATABASE_URL": database_url, "JWT_SECRET": "x" * 40, "EMAIL_TEMPLATES": str(tmp_path)})


def test_a_mail_template_of_ones_own_is_taken(database_url, tmp_path):
    (tmp_path / "recovery.subject").write_text("Reset for {{ email }} at {{ site_url }}")
    create_app({"DATABASE_URL": database_url, "JWT_SECRET": "x" * 40, "EMAIL_TEMPLATES": str(tmp_path)})


def test_json_answers_are_the_bytes_json_dumps_writes(database_url):
    """Flask's JSON answers are written by orjson where they can be: each is still the bytes
    json.dumps writes with Flask's `default` (dates as HTTP dates, Decimals as text), whichever
    encoder wrote it; indented in debug mode."""
    app = create_app({"DATABASE_URL": database_url, "JWT_SECRET": SECRET})

    @dataclasses.dataclass
    class Point:
        x: int

    values = [
        {"id": "7", "email": "ann@example.com", "user_metadata": {"name": "Zoë \U0001d11e", "n": 2.5}},
        {"when": datetime(2026, 11, 29, 12, 0, tzinfo=UTC), "day": date(2026, 11, 29)},
        {"amount": Decimal("1.50"), "key": uuid.UUID(int=7), "point": Point(3)},
        {"small": 1e-05, "tiny": -2.5e-07, "big": 2**70, 1: "an integer key"},
        ["a list", None],
    ]
    by_json = []
    dumps = app.json.dumps
    app.json.dumps = lambda value, **kwargs: by_json.append(value) or dumps(value, **kwargs)
    with app.app_context():
        for value in values:
            expected = json.dumps(value, default=app.json.default, separators=(",", ":")) + "\n"
            assert app.json.response(value).get_data(as_text=True) == expected
        assert by_json == values[1:4]  # the first and the last by orjson
        app.debug = True
        assert app.json.response(values[0]).get_data(as_text=True) == json.dumps(values[0], indent=2) + "\n"


def test_relative_sqlite_paths_are_anchored_at_the_project():
    assert config.absolute_sqlite_url("sqlite:///instance/x.db") == f"sqlite:///{ROOT}/instance/x.db"
    assert config.absolute_sqlite_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert config.absolute_sqlite_url("mysql+pymysql://u@h/db") == "mysql+pymysql://u@h/db"


def test_short_jwt_secret_refuses_to_start(database_url):
    with pytest.raises(variables.ConfigError, match="JWT_SECRET"):
        create_app({"DATABASE_URL": database_url, "JWT_SECRET": "too-short"})


def test_generated_secret_is_made_once_and_kept_private(tmp_path, caplog):
    with ThreadPoolExecutor(4) as pool:
        secrets = set(pool.map(lambda _: config.jwt_secret(None, tmp_path), range(8)))
    assert len(secrets) == 1 and len(secrets.pop()) >= 32
    assert stat.S_IMODE(os.stat(tmp_path / "jwt_secret").st_mode) == 0o600
    assert "JWT_SECRET is not set" in caplog.text


def test_dotenv_is_read_and_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "ROOT", tmp_path)
    (tmp_path / ".env").write_text("JWT_EXPIRY=120\nMAX_ROWS=5\n")
    monkeypatch.setenv("MAX_ROWS", "7")
    settings = config.from_environment()
    assert settings["JWT_EXPIRY"] == 120 and settings["MAX_ROWS"] == 7


def test_auto_migrate_false_leaves_the_database_alone(database_url):
    app = create_app({"DATABASE_URL": database_url, "JWT_SECRET": SECRET, "AUTO_MIGRATE": False})
    with app.app_context():
        assert not inspect(db.engine).get_table_names()
        runner = app.test_cli_runner()
        result = runner.invoke(args=["db", "upgrade"])
        assert result.exit_code == 0, result.output
        assert {"minibase_sessions", "users"} <= set(inspect(db.engine).get_table_names())
        db.engine.dispose()


@pytest.mark.fresh_database
def test_migrating_twice_is_harmless(make_app):
    make_app()
    app = make_app()
    with app.app_context():
        version = db.session.execute(text("SELECT version_num FROM minibase_alembic_version")).all()
    assert len(version) == 1


@pytest.mark.fresh_database
def test_a_start_on_a_migrated_database_takes_no_migration_lock(make_app, database_url):
    """The usual start, on a database at the newest revision, neither loads the migrations nor waits
    for the lock that one instance at a time migrates under: here held by another, for good."""
    make_app()
    engine, pool = create_engine(database_url), ThreadPoolExecutor(1)
    try:
        with engine.connect() as connection, migration_lock(connection):
            app = pool.submit(make_app).result(timeout=10)  # waiting for the lock: a TimeoutError
        with app.app_context():
            assert app_module.migrated_revision() == app_module.newest_revision()
    finally:
        pool.shutdown()  # a start that waited for the lock has it once the lock is let go
        engine.dispose()


def test_each_url_rule_builds_what_werkzeugs_own_rule_builds(app):
    """app.Rule compiles its URL builders on their first use: every rule of the app builds the same
    URL as werkzeug's Rule, with its arguments and with one it does not know (a query string)."""
    ours, theirs = app.url_map, Map(converters=app.url_map.converters)
    rules = list(ours.iter_rules())
    assert all(type(rule) is app_module.Rule for rule in rules)
    assert "_compile_builder(False)" in inspect_source(Rule.compile), "werkzeug builds URLs another way"
    for rule in rules:
        theirs.add(Rule(rule.rule, endpoint=rule.endpoint, methods=rule.methods, defaults=rule.defaults))
    mine, werkzeugs = ours.bind("localhost"), theirs.bind("localhost")
    for rule in rules:
        method = sorted(rule.methods)[0]
        values = {name: "7" for name in rule.arguments}
        for given in (values, {**values, "extra": "a b"}):
            assert mine.build(rule.endpoint, given, method) == werkzeugs.build(rule.endpoint, given, method)
    assert len(rules) > 100


@pytest.mark.slow  # starts python processes: seconds each, the slow tier's kind
def test_two_instances_starting_at_once_migrate_once(database_url):
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": SECRET, "PYTHONPATH": str(ROOT)}
    script = "from app import create_app; create_app()"
    processes = [
        subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()[-2000:]
    engine = create_engine(database_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM minibase_alembic_version")).scalar() == 1
    engine.dispose()


def test_cli_keys_prints_valid_keys(app):
    output = app.test_cli_runner().invoke(args=["keys"]).output
    keys = dict(line.split(":", 1) for line in output.strip().splitlines())
    assert tokens.api_key_role(keys["anon key"].strip(), SECRET) == "anon"
    assert tokens.api_key_role(keys["service_role key"].strip(), SECRET) == "service_role"


def test_cli_create_deactivate_and_revoke(app, anon_key):
    runner = app.test_cli_runner()
    result = runner.invoke(
        args=["create-user", "Cli@Example.com", "--password", "cli-secret", "--first-name", "Cli"]
    )
    assert result.exit_code == 0, result.output
    api = Api(app, anon_key)
    session = api.sign_in("cli@example.com", "cli-secret").json
    assert session["user"]["user_metadata"]["first_name"] == "Cli"
    assert runner.invoke(args=["revoke-sessions", "cli@example.com"]).exit_code == 0
    assert_auth_error(api.get("/auth/v1/user", token=session["access_token"]), 401, "session_not_found")
    assert runner.invoke(args=["deactivate-user", "cli@example.com"]).exit_code == 0
    assert_auth_error(api.sign_in("cli@example.com", "cli-secret"), 400, "user_inactive")
    missing = runner.invoke(args=["deactivate-user", "nobody@example.com"])
    assert missing.exit_code != 0 and "no user" in missing.output
    duplicate = runner.invoke(args=["create-user", "cli@example.com", "--password", "cli-secret"])
    assert duplicate.exit_code != 0 and "already registered" in duplicate.output


def test_unreachable_database_is_a_503(anon_key, tmp_path):
    port_nobody_listens_on = 9
    url = f"mysql+pymysql://root@127.0.0.1:{port_nobody_listens_on}/nothing"
    (tmp_path / "tables.toml").write_text('[tables.items]\nselect = "anon"\n')
    settings = {"DATABASE_URL": url, "JWT_SECRET": SECRET, "AUTO_MIGRATE": False}
    app = create_app({**settings, "TABLES_CONFIG": str(tmp_path / "tables.toml")})
    client = app.test_client()
    assert client.get("/health").status_code == 503
    assert client.get("/health").json == {"status": "unavailable"}
    response = client.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "a@b.co", "password": "secret-pw"},
        headers={"apikey": anon_key},
    )
    assert_auth_error(response, 503, "database_unavailable")
    assert_rest_error(client.get("/rest/v1/items", headers={"apikey": anon_key}), 503)


def test_cors_preflight_needs_no_key_and_exposes_content_range(app):
    client = app.test_client()
    preflight = client.options(
        "/auth/v1/user",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "apikey,authorization,prefer",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    response = client.get("/health", headers={"Origin": "https://app.example"})
    assert "Content-Range" in response.headers["Access-Control-Expose-Headers"]
    assert "X-Request-Id" in response.headers["Access-Control-Expose-Headers"]  # a browser app may read it
    assert response.headers["Access-Control-Allow-Origin"] == "*"


def test_cors_headers_answer_an_origin_only(app):
    """A browser always sends Origin on a cross-origin request; a server or mobile client's request
    without one gets no CORS headers, as PostgREST and GoTrue answer it."""
    response = app.test_client().get("/health")
    assert response.status_code == 200
    assert not [name for name in response.headers.keys() if name.startswith("Access-Control-")]


def test_no_password_or_hash_in_logs_or_bodies(api, app, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    session = api.sign_up(password="hunter2-secret")
    api.sign_in(password="wrong-guess-pw")
    api.sign_in(password="hunter2-secret")
    with app.app_context():
        stored = db.session.execute(users_table().select()).one().password
    from auth import accounts

    def explode(*args):
        raise RuntimeError("failure while handling hunter2-secret")

    monkeypatch.setattr(accounts, "hash_password", explode)
    api.patch("/auth/v1/user", token=session["access_token"], json={"password": "hunter3-secret"})
    for secret in ("hunter2-secret", "wrong-guess-pw", stored):
        assert secret not in str(session)
    assert stored not in caplog.text and "wrong-guess-pw" not in caplog.text
    assert "hunter3-secret" not in caplog.text


def test_access_token_lifetime_follows_jwt_expiry(make_app, anon_key):
    api = Api(make_app(JWT_EXPIRY=120), anon_key)
    session = api.sign_up()
    claims = jwt.decode(session["access_token"], options={"verify_signature": False})
    assert session["expires_in"] == 120 and claims["exp"] - claims["iat"] == 120


@pytest.mark.fresh_database
def test_models_and_migrations_agree(app):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    def own_tables(obj, name, type_, reflected, compare_to):
        made_by_env_py = ("minibase_alembic_version", "minibase_migration_lock")
        return type_ != "table" or (name.startswith("minibase_") and name not in made_by_env_py)

    with app.app_context(), db.engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"include_object": own_tables, "compare_type": True}
        )
        assert compare_metadata(context, db.metadata) == []


def test_cors_origins_limits_who_gets_cors_headers(make_app):
    client = make_app(CORS_ORIGINS="https://a.example, https://b.example").test_client()
    allowed = client.get("/health", headers={"Origin": "https://b.example"})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://b.example"
    refused = client.get("/health", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in refused.headers


def test_rate_limit_storage_uri_is_used(make_app, anon_key):
    from extensions import limiter

    make_app(RATE_LIMITS=True, RATE_LIMIT_STORAGE_URI="memory://")
    assert type(limiter.storage).__name__ == "MemoryStorage"
    make_app(RATE_LIMITS=True, RATE_LIMIT_STORAGE_URI="redis://127.0.0.1:1")
    assert type(limiter.storage).__name__ == "RedisStorage"


@pytest.mark.slow  # starts python processes: seconds each, the slow tier's kind
def test_python_wsgi_py_migrates_prints_the_keys_and_serves(database_url, tmp_path):
    """What `make run` ends in: the process a user starts, over HTTP. Its output is a pipe, as under
    a service manager, so the service_role key stays out of it."""
    import requests

    from support import free_port

    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": SECRET, "PORT": str(port)}
    server = subprocess.Popen(
        [sys.executable, "wsgi.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        printed = dict(server.stdout.readline().split(":", 1) for _ in range(2))
        anon = printed["anon key"].strip()
        assert tokens.api_key_role(anon, SECRET) == "anon"
        assert "flask --app app keys" in printed["service_role key"]
        assert tokens.api_key("service_role", SECRET) not in printed["service_role key"]
        assert f"127.0.0.1:{port}" in server.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                # connect: 1 s while it starts; read: up to 10 s, a loaded first answer can be slow
                health = requests.get(f"{base}/health", timeout=(1, 10))
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        assert health.json() == {"status": "ok"}
        signup = requests.post(
            f"{base}/auth/v1/signup",
            json={"email": "wsgi@example.com", "password": "secret-pw"},
            headers={"apikey": anon},
            timeout=10,
        )
        assert signup.status_code == 200
        server.terminate()
        assert server.wait(timeout=10) == 0  # SIGTERM drains and exits cleanly
    finally:
        server.kill()
        server.wait(timeout=10)
        server.stdout.close()
