"""/realtime/v1 over plain HTTP. The socket itself is served beside the app (runtime/asgi.py); what
reaches Flask here is a request that is not an upgrade, or any request where no socket can be held
(REALTIME=off, CGI, Passenger): a JSON 501 that says why."""

from flask import Blueprint, current_app, request

from blueprints import gateway
from errors import APIError, Rest
from extensions import state
from live import api

bp = Blueprint("realtime", __name__)


@bp.post("/realtime/v1/api/broadcast")
def broadcast():
    server = state().realtime
    if server is None:
        return not_served()
    api.send(server, request.get_json(silent=True), gateway.identity())
    return "", 202


@bp.post("/realtime/v1/api/broadcast/<path:topic>/events/<event>")
def broadcast_one(topic, event):
    """realtime-js's httpSend: the body is the payload, JSON or (application/octet-stream) bytes."""
    server = state().realtime
    if server is None:
        return not_served()
    kind = request.mimetype
    if kind not in ("", "application/json", "application/octet-stream"):
        raise APIError(
            415,
            Rest.BAD_BODY,
            "Unsupported Media Type. Use application/json or application/octet-stream",
        )
    private = request.args.get("private") == "true"
    binary = kind == "application/octet-stream"
    api.send_one(server, topic, event, request.get_data(), binary, private, gateway.identity())
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
