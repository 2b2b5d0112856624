"""One error type, its codes in one place, and the body each API promises for it.

The auth API's codes are GoTrue's snake_case `error_code`s. The table API's codes are what
PostgREST sends: a PostgreSQL SQLSTATE or one of PostgREST's own `PGRST…` codes. An official SDK
reads them as a string `code`; a plain client gets the HTTP status as an integer `code`
(docs/errors.md)."""

import logging

from flask import json, request
from sqlalchemy.exc import DataError, OperationalError
from werkzeug.exceptions import HTTPException

from database.transactions import describe

log = logging.getLogger("minibase")

API_VERSION_HEADER = "X-Supabase-Api-Version"
SDK_NAMES = ("supabase-js", "supabase-py", "postgrest-py", "postgrest-js", "supabase-")


class Auth:
    """The auth API's error codes (GoTrue's names)."""

    BAD_JSON = "bad_json"
    BAD_REQUEST = "bad_request"
    BAD_JWT = "bad_jwt"
    DATABASE_UNAVAILABLE = "database_unavailable"
    EMAIL_EXISTS = "email_exists"
    EMAIL_NOT_CONFIRMED = "email_not_confirmed"
    EMAIL_SEND_FAILED = "email_send_failed"
    INVALID_API_KEY = "invalid_api_key"
    INVALID_CREDENTIALS = "invalid_credentials"
    NO_API_KEY = "no_api_key"
    NO_AUTHORIZATION = "no_authorization"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    NOT_ADMIN = "not_admin"
    NOT_FOUND = "not_found"
    OTP_EXPIRED = "otp_expired"
    OVER_EMAIL_SEND_RATE_LIMIT = "over_email_send_rate_limit"
    OVER_REQUEST_RATE_LIMIT = "over_request_rate_limit"
    REQUEST_TOO_LARGE = "request_too_large"
    REFRESH_TOKEN_ALREADY_USED = "refresh_token_already_used"
    REFRESH_TOKEN_NOT_FOUND = "refresh_token_not_found"
    SESSION_EXPIRED = "session_expired"
    SESSION_NOT_FOUND = "session_not_found"
    SIGNUP_DISABLED = "signup_disabled"
    UNEXPECTED_FAILURE = "unexpected_failure"
    UNSUPPORTED_GRANT_TYPE = "unsupported_grant_type"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    USER_ALREADY_EXISTS = "user_already_exists"
    USER_BANNED = "user_banned"
    USER_INACTIVE = "user_inactive"
    USER_NOT_FOUND = "user_not_found"
    USER_REFERENCED = "user_referenced"
    VALIDATION_FAILED = "validation_failed"
    WEAK_PASSWORD = "weak_password"


class Rest:
    """The table API's error codes: PostgreSQL SQLSTATEs and PostgREST's own, as PostgREST sends them."""

    BAD_QUERY = "PGRST100"  # a query parameter that does not parse
    BAD_BODY = "PGRST102"  # a body that is not JSON or not of the right shape
    RANGE_NOT_SATISFIABLE = "PGRST103"
    NOT_ACCEPTABLE = "PGRST107"  # no media type of the Accept header is offered
    NOT_ONE_ROW = "PGRST116"  # a single object was asked for, not exactly one row matched
    NO_RELATIONSHIP = "PGRST200"
    AMBIGUOUS_RELATIONSHIP = "PGRST201"
    FUNCTION_NOT_FOUND = "PGRST202"
    TABLE_NOT_FOUND = "PGRST205"
    BAD_JWT = "PGRST301"
    NOT_FOUND = "PGRST125"  # a path the API does not serve
    METHOD_NOT_ALLOWED = "PGRST105"
    MISCONFIGURED = "PGRST002"
    DATABASE_UNAVAILABLE = "PGRST001"
    UNEXPECTED = "PGRST000"
    TOO_LARGE = "PGRST413"
    RATE_LIMITED = "PGRST429"
    NO_API_KEY = "PGRST301"
    UNIQUE_VIOLATION = "23505"
    FOREIGN_KEY_VIOLATION = "23503"
    NOT_NULL_VIOLATION = "23502"
    CHECK_VIOLATION = "23514"
    INTEGRITY_VIOLATION = "23000"
    INVALID_TEXT = "22P02"  # a value that does not convert to the column's type
    STRING_TOO_LONG = "22001"
    OUT_OF_RANGE = "22003"
    UNDEFINED_COLUMN = "42703"
    NO_CONFLICT_TARGET = "42P10"  # on_conflict names no unique constraint
    INSUFFICIENT_PRIVILEGE = "42501"
    READ_ONLY = "25006"  # a write to a view, to the users table or by a read-only function
    FILTER_REQUIRED = "21000"  # PATCH or DELETE without a filter


class APIError(Exception):
    """An error a client is meant to see. `code` is one of Auth's or Rest's. `api` forces one API's
    body shape ("auth" or "rest"); by default the path of the request decides."""

    def __init__(self, status, code, message, hint=None, details="", headers=None, api=None, extra=None):
        super().__init__(message)
        self.api = api
        self.status = status
        self.error_code = code
        self.message = message
        self.hint = hint
        self.details = details
        self.headers = headers or {}
        self.extra = extra or {}  # more fields of GoTrue's body, for official clients


# --- errors raised in more than one place


def user_inactive(status=400):
    return APIError(status, Auth.USER_INACTIVE, "User account is inactive")


def user_banned():
    return APIError(400, Auth.USER_BANNED, "User is banned")


def user_not_found(status=404):
    if status == 401:
        return APIError(401, Auth.USER_NOT_FOUND, "User from sub claim in JWT does not exist")
    return APIError(status, Auth.USER_NOT_FOUND, "User not found")


def bad_jwt(message="Invalid JWT: unable to parse or verify"):
    return APIError(401, Auth.BAD_JWT, message)


def no_authorization():
    return APIError(401, Auth.NO_AUTHORIZATION, "This endpoint requires a valid Bearer token")


def invalid_credentials():
    return APIError(400, Auth.INVALID_CREDENTIALS, "Invalid login credentials")


def refresh_token_not_found():
    return APIError(400, Auth.REFRESH_TOKEN_NOT_FOUND, "Invalid Refresh Token: Refresh Token Not Found")


def validation_failed(message):
    return APIError(400, Auth.VALIDATION_FAILED, message)


def bad_query(message, hint=None):
    return APIError(400, Rest.BAD_QUERY, message, hint=hint)


def bad_body(message, hint=None):
    return APIError(400, Rest.BAD_BODY, message, hint=hint)


# --- rendering

# Codes for an HTTP error that no view raised itself (routing, size, rate limits).
HTTP_ERROR_CODES = {
    400: (Auth.BAD_REQUEST, Rest.BAD_QUERY),
    404: (Auth.NOT_FOUND, Rest.NOT_FOUND),
    405: (Auth.METHOD_NOT_ALLOWED, Rest.METHOD_NOT_ALLOWED),
    406: (Auth.NOT_ACCEPTABLE, Rest.NOT_ACCEPTABLE),
    413: (Auth.REQUEST_TOO_LARGE, Rest.TOO_LARGE),
    415: (Auth.UNSUPPORTED_MEDIA_TYPE, Rest.BAD_BODY),
    429: (Auth.OVER_REQUEST_RATE_LIMIT, Rest.RATE_LIMITED),
}


def api_version():
    """The GoTrue API version an official client asked for, or None for a plain client."""
    return request.headers.get(API_VERSION_HEADER) or None


def official_sdk():
    """Whether a table API request comes from an official SDK, which wants PostgREST's string codes."""
    if "Accept-Profile" in request.headers or "Content-Profile" in request.headers:
        return True
    info = request.headers.get("X-Client-Info", "")
    return info.startswith(SDK_NAMES)


def echo_api_version(response):
    """after_request: tell an official client which auth API version answered."""
    if api_version() and request.path.startswith("/auth/"):
        response.headers[API_VERSION_HEADER] = api_version()
    return response


def which_api(error=None):
    if error is not None and error.api:
        return error.api
    return "auth" if request.path.startswith("/auth/") else "rest"


def render(error):
    """The body for `error` in the shape of the API it belongs to."""
    if which_api(error) == "auth":
        if api_version():
            body = {"code": error.error_code, "message": error.message, **error.extra}
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
            "code": error.error_code if official_sdk() else error.status,
            "hint": error.hint,
            "details": error.details,
        }
    return body, error.status, error.headers


# Supabase services minibase does not provide, by path prefix.
NOT_PROVIDED = {
    "/storage/v1": "Storage",
    "/realtime/v1": "Realtime",
    "/functions/v1": "Edge Functions",
    "/graphql/v1": "GraphQL",
}


def not_found(path):
    """The code and message of a 404 for a path no route serves, saying what minibase provides."""
    for prefix, service in NOT_PROVIDED.items():
        if path == prefix or path.startswith(prefix + "/"):
            return Rest.NOT_FOUND, f"minibase does not provide Supabase {service} ({prefix})"
    if path.startswith("/rest/v1/rpc/"):
        name = path.removeprefix("/rest/v1/rpc/")
        return Rest.FUNCTION_NOT_FOUND, f"Could not find the function {name}"
    if path.startswith("/auth/v1/"):
        return Auth.NOT_FOUND, f"minibase's auth API has no endpoint {path}"
    return Rest.NOT_FOUND, f"Not found: {path} (minibase serves /auth/v1 and /rest/v1)"


def handle_http_exception(exc):
    """Werkzeug's errors (404, 405, 413, 429, …) in our shape, keeping headers such as Allow."""
    response = exc.get_response()
    auth_code, rest_code = HTTP_ERROR_CODES.get(exc.code, (Auth.BAD_REQUEST, Rest.BAD_QUERY))
    code = auth_code if which_api() == "auth" else rest_code
    message = exc.description if exc.code != 429 else "Too many requests, try again later"
    if exc.code == 404:
        code, message = not_found(request.path[:200])
    body, status, _ = render(APIError(exc.code, code, message))
    response.set_data(json.dumps(body))
    response.mimetype = "application/json"
    response.status_code = status
    return response


def unavailable():
    """The 503 of a database that does not answer (stopped, frozen, too slow, connection lost)."""
    code = Rest.DATABASE_UNAVAILABLE if which_api() == "rest" else Auth.DATABASE_UNAVAILABLE
    return render(APIError(503, code, "The database is not answering, try again later"))


def handle_unexpected(exc):
    """Anything else: a 503 when the database does not answer, else a logged, generic 500."""
    rest = which_api() == "rest"
    if isinstance(exc, OperationalError):
        log.error("database unavailable on %s %s: %s", request.method, request.path, describe(exc))
        return unavailable()
    if isinstance(exc, DataError):
        # A value the database refused (too long, a character its charset lacks) that no check above
        # caught: the client's doing, so a 400, named by the database's code only in the log.
        log.warning("database refused a value on %s %s: %s", request.method, request.path, describe(exc))
        code = Rest.INVALID_TEXT if rest else Auth.VALIDATION_FAILED
        return render(APIError(400, code, "A value does not fit its column"))
    log.exception("unexpected error on %s %s", request.method, request.path)
    code = Rest.UNEXPECTED if rest else Auth.UNEXPECTED_FAILURE
    return render(APIError(500, code, "Unexpected failure, please try again"))


def register(app):
    app.after_request(echo_api_version)
    app.register_error_handler(APIError, render)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)
