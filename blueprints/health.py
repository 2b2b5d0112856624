"""The probes and the metrics, none under an API key: GET /health, 200 when the database answers;
GET /live, 200 while the process serves; GET /ready, 200 when the database answers, is migrated
and a configured Redis answers, else 503 naming what is not ready (PostgREST's admin server's
probes); GET /metrics with METRICS=on, for the service key or an address in METRICS_ALLOW."""

import ipaddress
import logging

from flask import Blueprint, current_app, request
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

import metrics
from auth.identity import api_key_role
from dashboard import health as checks
from database import transactions
from errors import APIError, Auth
from extensions import client_ip, db
from webhooks import outbox

bp = Blueprint("health", __name__)
log = logging.getLogger("minibase")


@bp.get("/health")
def health():
    try:
        transactions.read(select_one)  # a connection found dead is tried again on a new one
    except SQLAlchemyError as exc:
        log.error("health check: database unavailable (%s)", exc.__class__.__name__)
        return {"status": "unavailable"}, 503
    return {"status": "ok"}


def select_one():
    db.session.execute(text("SELECT 1"))


@bp.get("/live")
def live():
    return {"status": "ok"}


@bp.get("/ready")
def ready():
    missing = checks.not_ready()
    if missing:
        return {"status": "unavailable", "not_ready": missing}, 503
    return {"status": "ok"}


@bp.get("/metrics")
def exposition():
    config = current_app.config
    if not config["METRICS"]:
        raise APIError(404, Auth.NOT_FOUND, "Not found: /metrics (METRICS is off)", api="auth")
    allowed(config)
    measure_backlog()
    body, content_type = metrics.exposition()
    return body, 200, {"Content-Type": content_type, "Cache-Control": "no-store"}


def measure_backlog():
    """The webhook backlog, counted in the database when the metrics are read: one COUNT a scrape,
    every instance's deliveries, rather than one a worker's turn."""
    try:
        metrics.WEBHOOK_BACKLOG.set(outbox.backlog())
    except SQLAlchemyError as exc:  # the database's failure is /ready's to say; the rest still reads
        log.warning("metrics: the webhook backlog could not be counted (%s)", exc.__class__.__name__)


def allowed(config):
    """A 401 unless the caller is at an address of METRICS_ALLOW or presents the service key (as
    `apikey`, or as a bearer token: what Prometheus's `authorization` setting sends); a 403 for
    any other key or token."""
    address = client_ip()
    if config["METRICS_ALLOW"] and any(_within(address, network) for network in config["METRICS_ALLOW"]):
        return
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    key = request.headers.get("apikey") or (token.strip() if scheme.lower() == "bearer" else "")
    if not key:
        message = "Metrics need the service key or an address in METRICS_ALLOW"
        raise APIError(401, Auth.NO_AUTHORIZATION, message, api="auth")
    if api_key_role(key, config["JWT_KEYS"]) != "service_role":
        raise APIError(403, Auth.NOT_ADMIN, "Metrics need the service key", api="auth")


def _within(address, network):
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:  # "unknown", or a proxy's garbage
        return False
