"""The Flask extension objects, created once and bound to an app in create_app."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import flask_limiter
from flask import current_app, request
from flask_cors import CORS
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase

if TYPE_CHECKING:  # for annotations only: the modules that make the state import this one
    import jinja2
    import sqlalchemy as sa

    from dashboard.backups import Run
    from database.statements import Prepared
    from live.sessions import Realtime
    from runner.service import Functions
    from storage.files import Disk
    from storage.s3 import S3
    from tables_toml import TablesToml
    from tables_toml.webhooks import Schedule


class Base(DeclarativeBase):
    pass


@dataclass
class Schema:
    """The reflected exposed tables, when each name was last looked up, the prepared plans of reads
    (rest.plans.read_plan), most recently used last, and their filters' walks."""

    tables: dict = field(default_factory=dict)
    checked: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    plans: OrderedDict = field(default_factory=OrderedDict)
    walks: dict = field(default_factory=dict)  # (table, filters) -> their sql.Where (plans.walked)


@dataclass
class Minibase:
    """What the service keeps per app beside Flask's config; create_app makes it."""

    tables_toml: TablesToml  # tables.toml, read and checked once at start (create_app)
    dummy_hash: str | None = None  # checked when a sign-in names no user (signins.unknown_user_hash)
    dummy_cost: int | None = None  # its cost: the one stored hashes usually have
    users: sa.Table | None = None  # the users table, reflected on first use (models.users_table)
    # the users table, and auth.identity.prepared_session_user's statements over it
    session_user: tuple[sa.Table, tuple[Prepared | None, ...]] | None = None
    email_is_unique: bool = True  # whether a unique index on users.email guards sign-ups
    send_seconds: float = 0.05  # how long a recovery mail takes to send, on average (emails.recover)
    schema: Schema = field(default_factory=Schema)
    database_ready: bool = True  # migrated and its users table found (False: the database was down at start)
    prepared_at: float = 0.0  # when preparing the database was last tried (app.wait_for_database)
    preparing: threading.Lock = field(default_factory=threading.Lock)
    mail_templates: jinja2.Environment | None = None  # the e-mails' templates (auth.mail.templates)
    buckets_synced: bool = False  # whether the declared buckets were made or updated in the database
    realtime: Realtime | None = None  # this process's Realtime server, when it serves sockets
    function_runner: Functions | None = None  # the functions' worker pool and recent calls (runner.service)
    storage_backend: Disk | S3 | None = None  # where objects' bytes live (storage.files.backend)
    backup_run: Run | None = None  # the dashboard's backup being made, or the last one (dashboard.backups)
    # kind of rule -> storage.objects.prepared_find's statement
    object_reads: dict[str, Prepared | None] = field(default_factory=dict)
    bucket_read: Prepared | None = None  # storage.buckets.read's prepared statement
    reads: sa.Engine | None = None  # the prepared reads' engine (database.connections); None: db.engine
    # schedules added by code (webhooks.schedules.register), beside tables.toml's [schedules.NAME]
    internal_schedules: dict[str, Schedule] = field(default_factory=dict)
    own: threading.local | None = None  # SQLite file: each thread's reads connection (statements.prepared)


def state():
    """This app's Minibase. The app is taken from Flask's proxy once: an attribute asked through the
    proxy costs four times as much, and every request asks for this several times."""
    return current_app._get_current_object().extensions["minibase"]


def client_ip(asked=None):
    """The client's address: of `asked`, or of the current request. request.remote_addr is the
    proxy's X-Forwarded-For value only when TRUSTED_PROXIES says so."""
    return (request if asked is None else asked).remote_addr or "unknown"


class Limiter(flask_limiter.Limiter):
    """flask-limiter's Limiter, whose every app starts on its own store. Flask-Limiter remembers on
    the Limiter, not per app, that a shared store stopped answering and it counts in memory
    instead; a later app in the same process would count in memory too, and move its counts to
    its own store half-way once that store answers, forgetting what it had counted."""

    def init_app(self, app):
        super().init_app(app)
        self._storage_dead = False


db = SQLAlchemy(model_class=Base)
migrate = Migrate(compare_type=True, render_as_batch=True)
limiter = Limiter(key_func=client_ip, headers_enabled=True, key_prefix="minibase")
cors = CORS()
