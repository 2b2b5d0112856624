"""The dashboard's Functions page."""

from flask import request

from blueprints.dashboard.base import bp, page
from dashboard import functions


@bp.get("/functions")
def functions_page():
    chosen = request.args.get("function") or None
    return page("functions.html", chosen=chosen, **functions.overview(chosen))
