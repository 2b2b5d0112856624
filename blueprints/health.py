"""GET /health: 200 when the database answers, 503 when it does not (no API key needed)."""

import logging

from flask import Blueprint
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from database import transactions
from extensions import db

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
