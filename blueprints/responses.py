"""What every response gets on its way out: headers that keep browsers and caches from misusing it,
and one log line per request, with no key, token or password in it."""

import logging
import time
from urllib.parse import parse_qsl, urlencode

from flask import current_app, g, request
from sqlalchemy.exc import DBAPIError

from database import transactions
from errors import unavailable

log = logging.getLogger("minibase.requests")

# Query parameters whose values are secrets: the log shows that they were sent, not what they were.
SECRET_PARAMETERS = frozenset({"apikey", "access_token", "refresh_token", "token", "token_hash", "password"})


def start_clock():
    g.started = time.perf_counter()


def secure_headers(response):
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.status_code in (201, 204) and response.calculate_content_length() == 0:
        del response.headers["Content-Type"]  # nothing to label, least of all as text/html
    if request.path.startswith("/auth/"):
        # Sessions, tokens and users: never kept by a browser or a proxy cache.
        response.headers["Cache-Control"] = "no-store"
    return response


def logged_path():
    """The request's path and query string, secret values replaced by ***."""
    query = request.query_string.decode("latin-1")
    if not query:
        return request.path
    lowered = query.lower()
    if "%" not in query and not any(name in lowered for name in SECRET_PARAMETERS):
        return f"{request.path}?{query}"  # as sent: no secret's name in it, not even percent-encoded
    pairs = parse_qsl(query, keep_blank_values=True)
    shown = [(key, "***" if key.lower() in SECRET_PARAMETERS else value) for key, value in pairs]
    return f"{request.path}?{urlencode(shown, safe='*,.()[]:')}"


def log_request(response):
    if not log.isEnabledFor(logging.INFO):
        return response  # the line would be dropped: spare parsing the query for it
    started = g.get("started")
    took = (time.perf_counter() - started) * 1000 if started is not None else 0.0
    log.info("%s %s %s %.1fms", request.method, logged_path(), response.status_code, took)
    return response


def init_app(app):
    app.before_request(start_clock)
    app.after_request(log_request)
    app.after_request(secure_headers)


def end_transaction(response):
    """after_request: end the request's transaction (a read's included) while errors still become
    JSON: a connection that dies here gives the documented 503, not a bare 500 from teardown."""
    try:
        transactions.end_session()
    except DBAPIError as exc:
        log.error(
            "database unavailable at the end of %s %s: %s",
            request.method,
            request.path,
            transactions.describe(exc),
        )
        return current_app.make_response(unavailable())
    return response
