"""The application factory: configuration, extensions, blueprints and error handlers."""

import logging
import time

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory
from flask import Flask, current_app, request
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from werkzeug import routing
from werkzeug.middleware.proxy_fix import ProxyFix

import config
import metrics
import tables_toml
import variables
from auth import mail, signing_keys, tokens
from backups import make
from blueprints import gateway, responses
from blueprints.request import Request
from database import connections, failures, migration_lock, transactions
from extensions import Minibase, cors, db, limiter, migrate
from live import topics
from models import users_table
from rest import policies, reflection
from runner import service
from runtime import cli, traces
from storage import buckets
from tables_toml.webhooks import MAX_TIMEOUT
from webhooks import schedules, worker

MIGRATIONS = config.ROOT / "migrations"
VERSION_TABLE = "minibase_alembic_version"
PROBES = ("/live", "/ready", "/metrics")  # answered while the database is not ready
BACKUP_SCHEDULE = "backup"  # the name BACKUP_SCHEDULE's runs have among the schedules
RETRY_SECONDS = 1.0  # between two attempts to migrate while the database is down
log = logging.getLogger("minibase")
# Response headers a browser app may read (the SDKs read all of these).
EXPOSED_HEADERS = [
    "Content-Disposition",
    "Content-Range",
    "ETag",
    "Link",
    "Location",
    "Preference-Applied",
    "Retry-After",
    "Tus-Resumable",  # resumable uploads (TUS): what tus-js-client reads in a browser
    "Tus-Version",
    "Tus-Extension",
    "Tus-Max-Size",
    "Upload-Expires",
    "Upload-Length",
    "Upload-Metadata",
    "Upload-Offset",
    "X-Request-Id",  # what a browser app reports with an error, to find its log lines
    "X-Supabase-Api-Version",
    "X-Total-Count",
]


class Rule(routing.Rule):
    """werkzeug's URL rule, whose two URL builders (for url_for) are compiled on their first use
    rather than when the rule is added. Compiling them, an AST and a compile() each, was 60% of
    create_app (35 of 62 ms for some 150 rules): paid again by every command of the `flask` CLI and
    every test's app, for builders only the dashboard's few url_for ever call. The one private name
    used is werkzeug's `_compile_builder` (tests/test_factory.py checks it is still called)."""

    def _compile_builder(self, append_unknown=True):
        made = []
        compile_builder = super()._compile_builder

        def build(rule, *args, **kwargs):
            if not made:  # two threads may both compile it: the same function, either one serves
                made.append(compile_builder(append_unknown).__get__(rule, None))
            return made[0](*args, **kwargs)

        return build


class Service(Flask):
    """Flask, which asks of each view and hook, on every call, whether it is a coroutine function
    (about 5% of a small request's time, for six calls); here each is asked once."""

    KNOWN = 4096  # functions remembered; past that, asked each time as Flask does
    request_class = Request  # Flask's, and how an upload's body arrives (blueprints/request.py)
    json_provider_class = responses.JSONProvider
    url_rule_class = Rule

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._callable = {}

    def ensure_sync(self, func):
        try:
            return self._callable[func]
        except KeyError:
            made = super().ensure_sync(func)
            if len(self._callable) < self.KNOWN:
                self._callable[func] = made
            return made
        except TypeError:  # not hashable
            return super().ensure_sync(func)


def create_app(test_config=None):
    """The service. `test_config` replaces the environment: tests get exactly what they ask for."""
    app = Service(__name__, instance_path=str(config.INSTANCE), static_folder=None)
    settings = config.from_environment({} if test_config is not None else None)
    settings.update(test_config or {})
    app.config.from_mapping(config.flask_settings(settings))
    app.config["JWT_SECRET"] = config.jwt_secret(app.config["JWT_SECRET"], app.instance_path)
    app.config["JWT_KEYS"] = signing_keys.load(app.config["JWT_SIGNING_KEYS"], app.config["JWT_SECRET"])
    # No redirects: /rest/v1 and /rest/v1/ are one route, and a doubled slash is a 404, not a 308
    # whose Location would echo the client's Host header.
    app.url_map.strict_slashes = False
    app.url_map.merge_slashes = False
    if app.config["TRUSTED_PROXIES"]:
        hops = app.config["TRUSTED_PROXIES"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)

    if app.config["METRICS"]:
        metrics.enable(app.config["WORKERS"])  # before the workers fork: they count into one folder
    db.init_app(app)
    migrate.init_app(app, db, directory=str(MIGRATIONS), version_table=VERSION_TABLE)
    limiter.init_app(app)
    origins = [origin.strip() for origin in app.config["CORS_ORIGINS"].split(",")]
    cors.init_app(
        app,
        origins=origins if len(origins) > 1 else origins[0],
        expose_headers=EXPOSED_HEADERS,
        send_wildcard=True,
        always_send=False,  # CORS headers answer a browser's Origin, as PostgREST's and GoTrue's do
    )
    only_with_origin(app)
    app.extensions["minibase"] = Minibase(
        tables_toml=tables_toml.load(app.config["TABLES_CONFIG"], app.config["USERS_TABLE"])
    )

    from blueprints import (
        admin,
        auth,
        callouts,
        dashboard,
        functions,
        health,
        not_offered,
        realtime,
        rest,
        resumable,
        storage,
    )

    app.register_blueprint(health.bp)
    app.register_blueprint(auth.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(callouts.bp)
    app.register_blueprint(not_offered.bp)
    app.register_blueprint(rest.bp)
    app.register_blueprint(storage.bp)
    app.register_blueprint(resumable.bp)
    app.register_blueprint(realtime.bp)
    if app.config["FUNCTIONS"]:
        app.register_blueprint(functions.bp)
        app.extensions["minibase"].function_runner = service.Functions(app.config, function_environment(app))
    if app.config["DASHBOARD"]:
        app.register_blueprint(dashboard.bp)
    gateway.init_app(app)
    responses.register(app)
    cli.register(app)
    worker.init_app(app)
    schedule_backups(app)

    connections.init_app(app)
    with app.app_context():
        traces.init_app(app, [engine for engine in (db.engine, app.extensions["minibase"].reads) if engine])
    mail.warn_if_not_configured(app)
    mail.check_templates(app)
    with app.app_context():
        needed = (
            app.config["AUTO_MIGRATE"]
            or any(p.row_policies for p in policies.policies().values())
            or buckets.has_policies()
            or topics.has_policies()
        )
        if needed and not prepare_database():
            # Start all the same, and answer 503 until the database answers and is migrated: a host
            # that imports wsgi.py, or a database that starts after the service, needs no restart.
            app.extensions["minibase"].database_ready = False
            app.before_request(wait_for_database)
    return app


def function_environment(app):
    """What every function gets under Supabase's names: the project's keys and database URL
    (SUPABASE_URL is where the serving socket listens, found at the first call)."""
    secret = app.config["JWT_SECRET"]
    return {
        "SUPABASE_URL": app.config["API_EXTERNAL_URL"],
        "SUPABASE_ANON_KEY": tokens.api_key("anon", secret),
        "SUPABASE_SERVICE_ROLE_KEY": tokens.api_key("service_role", secret),
        "SUPABASE_DB_URL": app.config["DATABASE_URL"],
    }


def schedule_backups(app):
    """BACKUP_SCHEDULE: an internal schedule that makes and prunes archives, once across instances."""
    if app.config["BACKUP_SCHEDULE"]:
        try:
            schedules.register(app, BACKUP_SCHEDULE, app.config["BACKUP_SCHEDULE"], make.scheduled,
                               timeout=MAX_TIMEOUT)  # fmt: skip
        except ValueError as exc:
            raise variables.ConfigError(f"BACKUP_SCHEDULE: {exc}") from None


def only_with_origin(app):
    """flask-cors's after-request function, run only for a request with an Origin header: without one
    it adds nothing (always_send=False), yet matches the path and builds its debug lines first: about
    4% of a key read."""
    cors_headers = app.after_request_funcs[None].pop()
    if cors_headers.__name__ != "cors_after_request":
        raise RuntimeError(f"flask-cors registered {cors_headers.__name__}, not its after-request hook")

    @app.after_request
    def cors_for_browsers(response):
        # the environ's key: asking the headers for one that is missing raises and catches a KeyError
        return cors_headers(response) if "HTTP_ORIGIN" in request.environ else response


def prepare_database():
    """Apply the migrations and reflect the users table (AUTO_MIGRATE), and have the database compile
    every row policy (a ConfigError when one does not); False, said in one log line naming the
    database (never its password), when the database does not answer, or this instance lost its
    migration lease to another."""
    try:
        if current_app.config["AUTO_MIGRATE"]:
            upgrade_database()
            users_table()
            buckets.ensure_synced()
        reflection.check_row_policies()
        buckets.check_policies()
        topics.check()
    except migration_lock.LeaseLost as exc:  # another instance migrates: serve once it has
        log.error("%s: answering 503 until the database is migrated", exc)
        return False
    except OperationalError as exc:
        url = make_url(current_app.config["DATABASE_URL"])
        where = url.database if url.get_backend_name() == "sqlite" else f"{url.host}:{url.port or 3306}"
        log.error(
            "the database at %s is not answering (%s): answering 503 until it does",
            where,
            failures.describe(exc),
        )
        return False
    return True


def wait_for_database():
    """before_request while the database has not been prepared since the start: try again, at most
    once every RETRY_SECONDS, and answer 503 meanwhile."""
    cache = current_app.extensions["minibase"]
    if cache.database_ready:
        return None
    with cache.preparing:
        if not cache.database_ready and time.monotonic() - cache.prepared_at >= RETRY_SECONDS:
            cache.prepared_at = time.monotonic()
            # Migrations are not cut short by the request's DB_TIMEOUT: each statement has its own.
            transactions.unbound_waits()
            try:
                cache.database_ready = prepare_database()
            except variables.ConfigError as exc:  # a row policy the database refuses: say so, stay 503
                log.error("%s", exc)
            if cache.database_ready:
                log.info("the database answers: migrated, serving")
    if cache.database_ready:
        return None
    if request.path == "/health":
        return {"status": "unavailable"}, 503
    if request.path in PROBES:
        return None  # /live is 200, /ready says what is not ready, /metrics counts the 503s

    return responses.unavailable()


def upgrade_database():
    """Apply pending migrations; safe when several instances start at once (migrations/env.py). A
    database already at the newest revision is left as it is, without taking the migration lock or
    loading the migrations again: the usual restart, every `flask` command, every test's app."""
    if migrated_revision() == newest_revision():
        return
    command.upgrade(migrate.get_config(str(MIGRATIONS)), "head")


_NEWEST = []  # the newest migration's revision, read from migrations/versions once per process


def newest_revision():
    if not _NEWEST:
        _NEWEST.append(ScriptDirectory.from_config(migrate.get_config(str(MIGRATIONS))).get_current_head())
    return _NEWEST[0]


def migrated_revision():
    """The revision the database is at (one, on this linear history), or None before the first."""
    with db.engine.connect() as connection:
        if not sa.inspect(connection).has_table(VERSION_TABLE):
            return None
        return connection.execute(
            sa.select(sa.column("version_num")).select_from(sa.table(VERSION_TABLE))
        ).scalar()
