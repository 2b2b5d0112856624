"""The application factory: configuration, extensions, blueprints and error handlers."""

import tomllib

from alembic import command
from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

import config
from auth import mail
from blueprints import gateway, responses
from database import connections
from extensions import Minibase, cors, db, limiter, migrate
from models import users_table
from rest import policies
from runtime import cli
from storage import buckets

MIGRATIONS = config.ROOT / "migrations"
# Response headers a browser app may read (the SDKs read all of these).
EXPOSED_HEADERS = [
    "Content-Disposition",
    "Content-Range",
    "ETag",
    "Link",
    "Location",
    "Preference-Applied",
    "Retry-After",
    "X-Supabase-Api-Version",
    "X-Total-Count",
]


def create_app(test_config=None):
    """The service. `test_config` replaces the environment: tests get exactly what they ask for."""
    app = Flask(__name__, instance_path=str(config.INSTANCE), static_folder=None)
    settings = config.from_environment({} if test_config is not None else None)
    settings.update(test_config or {})
    app.config.from_mapping(config.flask_settings(settings))
    app.config["JWT_SECRET"] = config.jwt_secret(app.config["JWT_SECRET"], app.instance_path)
    app.json.sort_keys = False
    # No redirects: /rest/v1 and /rest/v1/ are one route, and a doubled slash is a 404, not a 308
    # whose Location would echo the client's Host header.
    app.url_map.strict_slashes = False
    app.url_map.merge_slashes = False
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
        always_send=False,  # CORS headers answer a browser's Origin, as PostgREST's and GoTrue's do
    )
    app.extensions["minibase"] = Minibase()

    from blueprints import admin, auth, health, rest, storage

    app.register_blueprint(health.bp)
    app.register_blueprint(auth.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(rest.bp)
    app.register_blueprint(storage.bp)
    gateway.init_app(app)
    responses.register(app)
    cli.register(app)
    load_tables_config(app)

    connections.init_app(app)
    mail.warn_if_not_configured(app)
    with app.app_context():
        if app.config["AUTO_MIGRATE"]:
            upgrade_database()
            users_table()
            buckets.ensure_synced()
    return app


def load_tables_config(app):
    """tables.toml: its [tables.*] and [functions.*] for the table API, its [buckets.*] for storage."""
    buckets.init_app(app)
    path = app.config.get("TABLES_CONFIG")
    if path is None or not app.extensions["minibase"].buckets:
        policies.init_app(app)
        return
    # rest.policies refuses sections it does not know: it gets the file without [buckets.*].
    document = policies_document(path)
    tables, functions = policies.parse(document, app.config["USERS_TABLE"], source=str(path))
    app.extensions["minibase"].policies = tables
    app.extensions["minibase"].functions = functions


def policies_document(path):
    with open(path, "rb") as file:
        document = tomllib.load(file)
    document.pop("buckets", None)
    return document


def upgrade_database():
    """Apply pending migrations; safe when several instances start at once (migrations/env.py)."""
    command.upgrade(migrate.get_config(str(MIGRATIONS)), "head")
