"""What stands in front of every API, as Supabase's gateway does, and what every response gets on its
way out: the API key every /auth/v1 and /rest/v1 request carries, the caller behind a bearer token,
one log line per request with no key, token or password in it, headers that keep browsers and
caches from misusing a response, and the end of the request's transaction."""

import functools
import logging
import re
import time
import uuid
from http import HTTPStatus
from urllib.parse import parse_qsl, urlencode

from flask import current_app, g, request
from sqlalchemy.exc import DBAPIError

import metrics
from auth import audit
from auth.identity import Identity, api_key_role, identify, is_secret_key
from blueprints import responses
from database import failures, transactions
from errors import REFUSED_BY_SERVER, APIError, Auth, Rest, Storage, bad_jwt, no_authorization, storage_error
from extensions import client_ip

FUNCTIONS_PREFIX = "/functions/v1/"
PROTECTED_PREFIXES = ("/auth/v1", "/rest/v1", "/storage/v1", "/realtime/v1")
# Reached by a browser from a link in a mail or a provider's redirect, which cannot add a header:
# open without a key, as at Supabase's gateway.
# The public signing keys are public: anyone verifying a token fetches them, without a key.
JWKS_PATH = "/auth/v1/.well-known/jwks.json"
OPEN_ROUTES = frozenset(
    {
        ("GET", "/auth/v1/verify"),
        ("GET", "/auth/v1/authorize"),
        ("GET", "/auth/v1/callback"),
        ("GET", JWKS_PATH),
        ("HEAD", JWKS_PATH),
        ("POST", "/storage/v1/upload/resumable/sign"),
    }
)
# The same for the storage URLs apps put in <img src> or hand to a client without credentials: public
# objects, and signed URLs, whose token is the permission (a resumable upload's, in x-signature).
OPEN_PREFIXES = {
    "GET": ("/storage/v1/object/public/", "/storage/v1/object/sign/", "/storage/v1/object/info/public/",
            "/storage/v1/render/image/public/", "/storage/v1/render/image/sign/"),
    "HEAD": ("/storage/v1/object/public/", "/storage/v1/object/sign/", "/storage/v1/upload/resumable/sign/"),
    "PUT": ("/storage/v1/object/upload/sign/",),
    "PATCH": ("/storage/v1/upload/resumable/sign/",),
    "DELETE": ("/storage/v1/upload/resumable/sign/",),
}  # fmt: skip
BROWSER_AGENT = "Mozilla/"
# Query parameters whose values are secrets: the log shows that they were sent, not what they were.
SECRET_PARAMETERS = frozenset({"apikey", "access_token", "refresh_token", "token", "token_hash", "password"})

# The GETs that answer with an object's bytes, but /object/info/ (its row), counted in the metrics.
DOWNLOADS = ("/storage/v1/object/", "/storage/v1/render/image/")

# A request id a trusted proxy may hand on (X-Request-Id): printable, no spaces, not too long.
REQUEST_ID = re.compile(r"[\x21-\x7e]{1,200}")

# Status lines as HTTP writes them ("201 Created"); Werkzeug's are in capitals ("201 CREATED").
STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}

log = logging.getLogger("minibase")
request_log = logging.getLogger("minibase.requests")


def init_app(app):
    app.before_request(before)
    app.after_request(after)
    app.teardown_request(lambda _exc: transactions.unbound_waits())


def before():
    """Every request, before its view: the clock starts (the request's DB_TIMEOUT for the database
    too), a preflight is answered, the key checked. The request is looked up behind Flask's proxy
    once, here and in `after`: each use of `request` costs that lookup, about ten times reading
    an attribute, and these run on every request. So do `g` and `current_app`."""
    context = g._get_current_object()
    context.started = time.perf_counter()
    config = current_app._get_current_object().config
    asked = request._get_current_object()
    context.request_id = request_id(asked, config["TRUSTED_PROXIES"])
    transactions.bound_waits(config["DB_TIMEOUT"])
    audit.begin(client_ip(asked), door(asked.path))
    if (refused := asked.environ.get(REFUSED_BY_SERVER)) is not None:
        raise refused  # the server could not read the request (runtime.server.Refusal)
    return answer_preflight(asked) or require_api_key(asked, context, config["JWT_KEYS"])


def request_id(asked, trusted_proxies):
    """The proxy's X-Request-Id behind a trusted proxy, else one made here."""
    if trusted_proxies and (given := asked.headers.get("X-Request-Id")) and REQUEST_ID.fullmatch(given):
        return given
    return str(uuid.uuid4())


def door(path):
    """Which door of the audit log a request comes through."""
    if path.startswith("/dashboard"):
        return audit.DASHBOARD
    return audit.ADMIN if path.startswith("/auth/v1/admin") else audit.AUTH


def after(response):
    """Every response, on its way out: the transaction ended (a 503 if the connection died there),
    the version echoed, the headers set, then the log line of the final response."""
    response = end_transaction(response)
    asked = request._get_current_object()
    return log_request(secure_headers(echo_api_version(response, asked), asked), asked)


# --- who is calling


def answer_preflight(asked):
    """before_request: a browser's CORS preflight is answered 200 on every path, served or not, so
    that the request it precedes is sent and the app reads minibase's JSON answer to it (a 404
    saying what is not provided) instead of "Failed to fetch". flask-cors adds the CORS headers. A
    function's own preflight is its view's to answer (blueprints/functions.py)."""
    if asked.method == "OPTIONS" and "Access-Control-Request-Method" in asked.headers:
        if asked.path.startswith(FUNCTIONS_PREFIX) and "functions" in current_app.blueprints:
            return None
        return current_app.response_class(status=200)
    return None


def require_api_key(asked, context, keys):
    """before_request: every /auth/v1, /rest/v1 and /storage/v1 request carries a valid key, but a browser's
    preflight and the OPEN_ROUTES. The key's role goes to `context` (the request's `g`); `keys` is
    JWT_KEYS."""
    path, method = asked.path, asked.method
    if not path.startswith(PROTECTED_PREFIXES) or method == "OPTIONS":
        return
    if (method, path.rstrip("/")) in OPEN_ROUTES or path.startswith(OPEN_PREFIXES.get(method, ())):
        context.api_key_role = "anon"
        return
    key = asked.headers.get("apikey") or asked.args.get("apikey")
    if not key:
        raise APIError(
            401,
            Auth.NO_API_KEY,
            "No API key found in request",
            hint="No `apikey` request header or url param was found.",
            details="",  # Supabase's gateway, not PostgREST, says it
            api="rest",
        )
    role = api_key_role(key, keys)
    if role is None:
        raise APIError(
            401,
            Auth.INVALID_API_KEY,
            "Invalid API key",
            hint="Double check your apikey.",
            details="",
            api="rest",
        )
    refuse_secret_key_in_browser(key, asked)
    context.api_key_role = role


def refuse_secret_key_in_browser(key, asked):
    """A secret key (sb_secret_…) sent by a browser is refused, as Supabase's gateway refuses it:
    every browser's User-Agent starts with Mozilla/, and a key in a page is a leaked key."""
    if is_secret_key(key) and asked.headers.get("User-Agent", "").startswith(BROWSER_AGENT):
        raise APIError(
            401,
            Auth.INVALID_API_KEY,
            "Forbidden use of secret API key in browser",
            hint="Secret API keys belong on servers; a browser app uses a publishable key.",
            details="",  # the gateway's, as the other API-key errors
            api="rest",
        )


def bearer_token(asked=None):
    """The token of `Authorization: Bearer <token>`, None without the header; a 401 when it is malformed."""
    header = (request if asked is None else asked).headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise no_authorization()
    return token


def identity():
    """The caller: a signed-in user when a valid access token is presented, else the API key's role.
    A dead token is a 401 in the API's own terms: GoTrue's code, or PostgREST's PGRST301."""
    context = g._get_current_object()
    who = getattr(context, "identity", None)
    if who is None:
        asked = request._get_current_object()
        try:
            token = bearer_token(asked)
            if token is not None:
                refuse_secret_key_in_browser(token, asked)
            who = Identity(context.api_key_role) if token is None else identify(token)
            if who.user_id is not None:
                audit.acting(who.user.email, who.user_id)
            elif who.role == "service_role":
                audit.acting("service_role")
        except APIError as error:
            if asked.path.startswith("/rest/"):
                raise APIError(401, Rest.BAD_JWT, error.message) from None
            if asked.path.startswith("/storage/"):
                raise storage_error(401, Storage.INVALID_JWT, error.message, "InvalidJWT") from None
            raise
        context.identity = who
    return who


def current_user_identity():
    """A signed-in user, or the 401 the auth API gives when there is none (an API key is no user)."""
    if bearer_token() is None:
        raise no_authorization()
    who = identity()
    if who.user_id is None:
        raise bad_jwt(message="invalid JWT: an API key is not a user's token")
    return who


def requires_user(view):
    """A view for signed-in users only; it gets the caller's Identity as `who`."""

    @functools.wraps(view)
    def wrapped(**kwargs):
        return view(who=current_user_identity(), **kwargs)

    return wrapped


def require_service_role():
    """A 403 unless the caller holds the service_role key: the administrator's endpoints."""
    if identity().role != "service_role":
        raise APIError(403, Auth.NOT_ADMIN, "User not allowed")


# --- on the way out


def echo_api_version(response, asked):
    """Tell an official client which auth API version answered."""
    if asked.path.startswith("/auth/") and (version := asked.headers.get(responses.API_VERSION_HEADER)):
        response.headers[responses.API_VERSION_HEADER] = version
    return response


def secure_headers(response, asked):
    line = STATUS_LINES.get(response.status_code)
    if line is not None and line != response.status:  # "200 OK" is already HTTP's and Werkzeug's
        response.status = line
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.status_code in (201, 204) and response.calculate_content_length() == 0:
        del response.headers["Content-Type"]  # nothing to label, least of all as text/html
    if asked.path.startswith("/auth/") and asked.path != JWKS_PATH:
        # Sessions, tokens and users: never kept by a browser or a proxy cache.
        response.headers["Cache-Control"] = "no-store"
    return response


def end_transaction(response):
    """End the request's transaction (a read's included) while errors still become JSON: a
    connection that dies here gives the documented 503, not a bare 500 from teardown."""
    try:
        transactions.end_session()
    except DBAPIError as exc:
        log.error(
            "database unavailable at the end of %s %s: %s",
            request.method,
            request.path,
            failures.describe(exc),
        )
        return current_app.make_response(responses.unavailable())
    return response


def logged_path(asked):
    """The request's path and query string, secret values replaced by ***."""
    query = asked.query_string.decode("latin-1")
    if not query:
        return asked.path
    lowered = query.lower()
    if "%" not in query and not any(name in lowered for name in SECRET_PARAMETERS):
        return f"{asked.path}?{query}"  # as sent: no secret's name in it, not even percent-encoded
    pairs = parse_qsl(query, keep_blank_values=True)
    shown = [(key, "***" if key.lower() in SECRET_PARAMETERS else value) for key, value in pairs]
    return f"{asked.path}?{urlencode(shown, safe='*,.()[]:')}"


def log_request(response, asked):
    """The request's log line, its X-Request-Id, and its count in the metrics."""
    context = g._get_current_object()
    started = getattr(context, "started", None)
    took = time.perf_counter() - started if started is not None else 0.0
    status = response.status_code
    metrics.answered(asked.path, status, took)
    if (
        status in (200, 206)
        and asked.method == "GET"
        and asked.path.startswith(DOWNLOADS)
        and not asked.path.startswith("/storage/v1/object/info/")
    ):
        metrics.STORAGE_BYTES_OUT.inc(response.content_length or 0)  # an object's bytes, or its range
    if (made := getattr(context, "request_id", None)) is None:
        made = context.request_id = str(uuid.uuid4())  # before() did not run: a refused request
    response.headers["X-Request-Id"] = made
    if not request_log.isEnabledFor(logging.INFO):
        return response  # the line would be dropped: spare parsing the query for it
    line = (asked.method, logged_path(asked), status, took * 1000)
    if current_app._get_current_object().config["LOG_FORMAT"] == "json":
        request_log.info("%s %s %s %.1fms", *line, extra=request_fields(asked, context, status, took))
    else:
        request_log.info("%s %s %s %.1fms", *line)
    return response


def request_fields(asked, context, status, took):
    """The request's fields of a JSON log line (the caller's role and user id only as far as the
    request found them: the log does not read a token of its own)."""
    who = getattr(context, "identity", None)
    rule = asked.url_rule
    return {
        "request_id": context.request_id,
        "method": asked.method,
        "path": logged_path(asked),
        "route": rule.rule if rule is not None else None,
        "status": status,
        "duration_ms": round(took * 1000, 3),
        "role": who.role if who is not None else getattr(context, "api_key_role", None),
        "user_id": str(who.user_id) if who is not None and who.user_id is not None else None,
        "ip": client_ip(asked),
    }
