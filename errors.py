"""One error type, and the bodies each API promises for it (SPEC §2, §3.4, §4.4)."""

import logging

from flask import json, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

log = logging.getLogger("minibase")

API_VERSION_HEADER = "X-Supabase-Api-Version"

# error_code for an HTTP error that no view raised itself (routing, size, rate limits).
HTTP_ERROR_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "over_request_rate_limit",
}


class APIError(Exception):
    """An error a client is meant to see. `api` forces one API's body shape ("auth" or "rest");
    by default the path of the request decides."""

    def __init__(self, status, error_code, message, hint=None, details="", headers=None, api=None):
        super().__init__(message)
        self.api = api
        self.status = status
        self.error_code = error_code
        self.message = message
        self.hint = hint
        self.details = details
        self.headers = headers or {}


def api_version():
    """The GoTrue API version an official client asked for, or None for a plain client."""
    return request.headers.get(API_VERSION_HEADER) or None


def echo_api_version(response):
    """after_request: tell an official client which auth API version answered."""
    if api_version() and request.path.startswith("/auth/"):
        response.headers[API_VERSION_HEADER] = api_version()
    return response


def render(error):
    """The body for `error` in the shape of the API it belongs to."""
    api = error.api or ("auth" if request.path.startswith("/auth/") else "rest")
    if api == "auth":
        if api_version():
            body = {"code": error.error_code, "message": error.message}
        else:
            body = {
                "code": error.status,
                "error_code": error.error_code,
                "msg": error.message,
                "message": error.message,
            }
    else:
        body = {
            "message": error.message,
            "code": error.status,
            "hint": error.hint,
            "details": error.details,
        }
    return body, error.status, error.headers


def handle_http_exception(exc):
    """Werkzeug's errors (404, 405, 413, 429, …) in our shape, keeping headers such as Allow."""
    response = exc.get_response()
    code = HTTP_ERROR_CODES.get(exc.code, "http_error")
    message = exc.description if exc.code != 429 else "Too many requests, try again later"
    body, status, _ = render(APIError(exc.code, code, message))
    response.set_data(json.dumps(body))
    response.mimetype = "application/json"
    response.status_code = status
    return response


def handle_unexpected(exc):
    """Anything else: a 503 when the database does not answer, else a logged, generic 500."""
    if isinstance(exc, OperationalError):
        # The cause is logged without parameters: they may hold a password hash.
        log.error("database unavailable: %s", exc.orig.__class__.__name__)
        return render(APIError(503, "database_unavailable", "The database is not answering"))
    log.exception("unexpected error on %s %s", request.method, request.path)
    return render(APIError(500, "unexpected_failure", "Unexpected failure, please try again"))


def register(app):
    app.after_request(echo_api_version)
    app.register_error_handler(APIError, render)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)
