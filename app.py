"""The application factory: configuration, extensions, blueprints and error handlers."""

from alembic import command
from flask import Flask
from sqlalchemy import event
from werkzeug.middleware.proxy_fix import ProxyFix

import cli
import config
import errors
import gateway
import policies
from extensions import Minibase, cors, db, limiter, migrate
from models import users_table
from passwords import dummy_hash

MIGRATIONS = config.ROOT / "migrations"
EXPOSED_HEADERS = ["Content-Range", "Retry-After", "X-Supabase-Api-Version"]


def create_app(test_config=None):
    """The service. `test_config` replaces the environment: tests get exactly what they ask for."""
    app = Flask(__name__, instance_path=str(config.INSTANCE), static_folder=None)
    settings = config.from_environment({} if test_config is not None else None)
    settings.update(test_config or {})
    app.config.from_mapping(config.flask_settings(settings))
    app.config["JWT_SECRET"] = config.jwt_secret(app.config["JWT_SECRET"], app.instance_path)
    app.json.sort_keys = False
    if app.config["TRUSTED_PROXIES"]:
        hops = app.config["TRUSTED_PROXIES"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)

    db.init_app(app)
    migrate.init_app(app, db, directory=str(MIGRATIONS), version_table="minibase_alembic_version")
    limiter.init_app(app)
    origins = [origin.strip() for origin in app.config["CORS_ORIGINS"].split(",")]
    cors.init_app(
        app,
        origins=origins if len(origins) > 1 else origins[0],
        expose_headers=EXPOSED_HEADERS,
        send_wildcard=True,
    )
    app.extensions["minibase"] = Minibase(dummy_hash=dummy_hash(app.config["BCRYPT_ROUNDS"]))

    from blueprints import admin, auth, health, rest

    app.register_blueprint(health.bp)
    app.register_blueprint(auth.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(rest.bp)
    app.before_request(gateway.require_api_key)
    errors.register(app)
    cli.register(app)
    policies.init_app(app)

    with app.app_context():
        event.listen(db.engine, "connect", configure_connection)
        if app.config["AUTO_MIGRATE"]:
            upgrade_database()
            users_table()
    return app


def upgrade_database():
    """Apply pending migrations; safe when several instances start at once (migrations/env.py)."""
    command.upgrade(migrate.get_config(str(MIGRATIONS)), "head")


def configure_connection(dbapi_connection, _record):
    """Per-connection settings: WAL and a busy timeout on SQLite; strict mode and UTC on MySQL."""
    cursor = dbapi_connection.cursor()
    if type(dbapi_connection).__module__.startswith("sqlite3"):
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.execute("PRAGMA foreign_keys=ON")
    else:
        # Strict mode: a value that does not fit is an error, not silently truncated data.
        cursor.execute(
            "SET SESSION sql_mode = TRIM(BOTH ',' FROM CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES'))"
        )
        cursor.execute("SET SESSION time_zone = '+00:00'")
    cursor.close()
