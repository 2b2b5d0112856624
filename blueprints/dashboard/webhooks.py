"""/dashboard/webhooks: the database webhooks and schedules tables.toml declares, their recent
deliveries (each attempt) and runs, and a failed delivery sent again."""

import time

from flask import request

from blueprints.dashboard.base import bp, done, page
from errors import APIError, Auth
from extensions import state
from webhooks import outbox, schedules

SHOWN = 50  # deliveries and runs on the page
STATUSES = ("pending", "delivered", "failed")


@bp.get("/webhooks")
def webhooks_page():
    wanted = request.args.get("status", "")
    status = wanted if wanted in STATUSES else None
    return page(
        "webhooks.html",
        hooks=sorted(state().tables_toml.webhooks.values(), key=lambda hook: hook.name),
        schedules=sorted(schedules.planned(state()).values(), key=lambda schedule: schedule.name),
        deliveries=outbox.listing(status=status, limit=SHOWN),
        runs=schedules.history(limit=SHOWN),
        status=status,
        statuses=STATUSES,
    )


@bp.post("/webhooks/deliveries/<int:delivery_id>/resend")
def resend_delivery(delivery_id):
    if delivery_id > 2**62 or not outbox.resend(delivery_id, time.time()):
        raise APIError(409, Auth.CONFLICT, "Only a failed delivery can be sent again.")
    return done(".webhooks_page", "resent")
