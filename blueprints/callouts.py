"""/auth/v1/admin/webhooks and /auth/v1/admin/schedules: the deliveries of the database webhooks
with their attempts, a failed one sent again, and the schedules' runs; for the service_role key only."""

import re
import time

from flask import Blueprint, request

from blueprints.gateway import require_service_role
from errors import APIError, Auth
from webhooks import outbox, schedules

bp = Blueprint("callouts", __name__, url_prefix="/auth/v1/admin")
bp.before_request(require_service_role)

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
STATUSES = {
    "deliveries": ("pending", "delivered", "failed"),
    "runs": ("running", "succeeded", "failed", "skipped"),
}
MAX_LIMIT = 500


def _query(kind, name_key):
    """(name, status, limit, before) from the query string; a 400 names what is wrong."""
    args = request.args
    unknown = sorted(set(args) - {name_key, "status", "limit", "before"})
    if unknown:
        raise APIError(400, Auth.VALIDATION_FAILED, f"unknown parameter {unknown[0][:50]!r}")
    name, status = args.get(name_key), args.get("status")
    if name is not None and not NAME.fullmatch(name):
        raise APIError(400, Auth.VALIDATION_FAILED, f"{name_key} must be 1 to 64 letters, digits, _ or -")
    if status is not None and status not in STATUSES[kind]:
        raise APIError(400, Auth.VALIDATION_FAILED, f"status must be one of {', '.join(STATUSES[kind])}")
    return name, status, _integer(args, "limit", 50, MAX_LIMIT), _integer(args, "before", None, 2**62)


def _integer(args, key, default, most):
    raw = args.get(key)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw[:20]) <= most:
        raise APIError(400, Auth.VALIDATION_FAILED, f"{key} must be an integer from 1 to {most}")
    return int(raw)


@bp.get("/webhooks/deliveries")
def deliveries():
    """The newest deliveries, newest first, each with its attempts; `hook`, `status`, `limit` and
    `before` (a delivery id: the page after it) choose."""
    hook, status, limit, before = _query("deliveries", "hook")
    return {"deliveries": outbox.listing(hook, status, limit, before)}


@bp.post("/webhooks/deliveries/<int:delivery_id>/resend")
def resend(delivery_id):
    """A failed delivery back in its hook's queue, sent once more at once: 202; 404 if there is no
    such delivery, 409 if it is not failed."""
    if delivery_id > 2**62:
        raise APIError(404, Auth.NOT_FOUND, "No such delivery")
    if outbox.resend(delivery_id, time.time()):
        return {"id": delivery_id, "status": "pending"}, 202
    if not outbox.exists(delivery_id):
        raise APIError(404, Auth.NOT_FOUND, "No such delivery")
    raise APIError(409, Auth.CONFLICT, "Only a failed delivery can be sent again")


@bp.get("/schedules/runs")
def runs():
    """The newest runs of the schedules, newest first; `schedule`, `status`, `limit`, `before`."""
    schedule, status, limit, before = _query("runs", "schedule")
    return {"runs": schedules.history(schedule, limit, before, status)}
