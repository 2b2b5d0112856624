"""/realtime/v1 over plain HTTP. The socket itself is served beside the app (runtime/asgi.py); what
reaches Flask here is a request that is not an upgrade, or any request where no socket can be held
(REALTIME=off, CGI, Passenger): a JSON 501 that says why."""

from flask import Blueprint, current_app, request

from blueprints import gateway
from errors import APIError, Rest
from live import api

bp = Blueprint("realtime", __name__)


@bp.post("/realtime/v1/api/broadcast")
def broadcast():
    server = current_app.extensions["minibase"].realtime
    if server is None:
        return not_served()
    api.send(server, request.get_json(silent=True), gateway.identity())
    return "", 202


@bp.route("/realtime/v1", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
@bp.route("/realtime/v1/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def not_served(rest=""):
    if current_app.config.get("REALTIME_SERVED"):
        raise APIError(
            400, Rest.REALTIME_UNAVAILABLE, "Expected a WebSocket upgrade", hint="Connect with realtime-js."
        )
    why = (
        "REALTIME is off"
        if not current_app.config["REALTIME"]
        else "this server cannot hold a WebSocket open (CGI, Passenger or a plain WSGI host)"
    )
    raise APIError(
        501,
        Rest.REALTIME_UNAVAILABLE,
        f"Realtime is not available: {why}",
        hint="Serve minibase with `python wsgi.py` (REALTIME=on) to use Realtime; see docs/realtime.md.",
    )
