"""The answer's shape for the client that asked: GoTrue's, PostgREST's or Supabase Storage's error
body, in the seed's plain form (an integer `code`) or in an official SDK's (it sends an API version
header, or names itself in X-Client-Info), the user id as a string for the SDKs, and the JSON 404 of
a path minibase does not serve."""

import logging

from flask import current_app, json, request
from flask.json.provider import DefaultJSONProvider
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

import encoding
import metrics
from auth import tokens
from database.failures import describe
from database.failures import unavailable as not_answering
from errors import OBJECT_TOO_LARGE, APIError, Auth, Rest, Storage, storage_error

log = logging.getLogger("minibase")

API_VERSION_HEADER = "X-Supabase-Api-Version"
SDK_NAMES = ("supabase-js", "supabase-py", "postgrest-py", "postgrest-js", "supabase-")

# Codes for an HTTP error that no view raised itself (routing, size, rate limits).
HTTP_ERROR_CODES = {
    400: (Auth.BAD_REQUEST, Rest.BAD_QUERY),
    404: (Auth.NOT_FOUND, Rest.NOT_FOUND),
    405: (Auth.METHOD_NOT_ALLOWED, Rest.METHOD_NOT_ALLOWED),
    406: (Auth.NOT_ACCEPTABLE, Rest.NOT_ACCEPTABLE),
    413: (Auth.REQUEST_TOO_LARGE, Rest.TOO_LARGE),
    415: (Auth.UNSUPPORTED_MEDIA_TYPE, Rest.BAD_BODY),
    431: (Auth.REQUEST_TOO_LARGE, Rest.TOO_LARGE),
    429: (Auth.OVER_REQUEST_RATE_LIMIT, Rest.RATE_LIMITED),
}
# The same for the storage API: its code and the `error` name Supabase Storage sends with it.
STORAGE_HTTP_ERRORS = {
    404: (Storage.NOT_FOUND, "Not Found"),
    405: (Storage.METHOD_NOT_ALLOWED, "Method Not Allowed"),
    413: (Storage.ENTITY_TOO_LARGE, "Payload too large"),
    431: (Storage.INVALID_REQUEST, "Request Header Fields Too Large"),
    429: (Storage.RATE_LIMITED, "Too Many Requests"),
}


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON answers, written by orjson where its bytes are json.dumps's
    (encoding.compact_json): a user object in 1.7 µs, where json.dumps took 7.8. What orjson cannot
    write as json does, json.dumps writes, as it writes every answer in debug mode (indented). Keys
    keep their order. `_prepare_response_obj` is Flask's own (tests/test_factory.py calls this)."""

    sort_keys = False

    def response(self, *args, **kwargs):
        if (self.compact is None and self._app.debug) or self.compact is False or self.sort_keys:
            return super().response(*args, **kwargs)
        value = self._prepare_response_obj(args, kwargs)
        text = encoding.compact_json(value) if self.ensure_ascii else None
        if text is None:
            text = self.dumps(value, separators=(",", ":")).encode()
        elif isinstance(text, str):
            text = text.encode()
        return self._app.response_class(text + b"\n", mimetype=self.mimetype)


def api_version():
    """The GoTrue API version an official client asked for, or None for a plain client."""
    return request._get_current_object().headers.get(API_VERSION_HEADER) or None  # one proxy lookup


def string_codes():
    """Whether the table API's error `code` is PostgREST's string: for the official SDKs, and for
    every client when REST_ERROR_CODES=postgrest (postgrest-js alone names itself nowhere)."""
    return current_app.config["REST_ERROR_CODES"] == "postgrest" or official_sdk()


def official_sdk():
    """Whether a table API request comes from an official SDK, which wants PostgREST's string codes."""
    if "Accept-Profile" in request.headers or "Content-Profile" in request.headers:
        return True
    info = request.headers.get("X-Client-Info", "")
    return info.startswith(SDK_NAMES)


def which_api(error=None):
    if error is not None and error.api:
        return error.api
    if request.path.startswith("/storage/"):
        return "storage"
    return "auth" if request.path.startswith("/auth/") else "rest"


def render(error):
    """The body for `error` in the shape of the API it belongs to."""
    api = which_api(error)
    if api == "functions":  # Supabase's functions gateway: {"code", "message"} and sb-error-code
        return {"code": error.error_code, "message": error.message}, error.status, error.headers
    if api == "storage":
        name = error.extra.get("error", error.error_code)
        body = {
            "statusCode": str(error.status),
            "code": error.error_code,
            "error": name,
            "message": error.message,
        }
    elif api == "auth":
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
            "code": error.error_code if string_codes() else error.status,
            "hint": error.hint,
            "details": error.details,
        }
    return body, error.status, error.headers


# Supabase services minibase does not provide, by path prefix.
NOT_PROVIDED = {
    "/realtime/v1": "Realtime",
    "/functions/v1": "Edge Functions",
    "/graphql/v1": "GraphQL",
}


def not_found(path):
    """The code and message of a 404 for a path no route serves, saying what minibase provides."""
    for prefix, service in NOT_PROVIDED.items():
        if prefix == "/functions/v1" and "functions" in current_app.blueprints:
            continue  # served: a path no function route takes is no function
        if path == prefix or path.startswith(prefix + "/"):
            return Rest.NOT_FOUND, f"minibase does not provide Supabase {service} ({prefix})"
    if path.startswith("/rest/v1/rpc/"):
        name = path.removeprefix("/rest/v1/rpc/")
        return Rest.FUNCTION_NOT_FOUND, f"Could not find the function {name}"
    if path.startswith("/auth/v1/"):
        return Auth.NOT_FOUND, f"minibase's auth API has no endpoint {path}"
    return Rest.NOT_FOUND, f"Not found: {path} (minibase serves /auth/v1, /rest/v1 and /storage/v1)"


def handle_http_exception(exc):
    """Werkzeug's errors (404, 405, 413, 429, …) in our shape, keeping headers such as Allow."""
    response = exc.get_response()
    if which_api() == "storage":
        code, name = STORAGE_HTTP_ERRORS.get(exc.code, (Storage.INVALID_REQUEST, "Bad Request"))
        message = f"Route {request.method}:{request.path[:200]} not found" if exc.code == 404 else None
        message = OBJECT_TOO_LARGE if exc.code == 413 else message
        error = storage_error(exc.code, code, message or exc.description, name)
        response.set_data(json.dumps(render(error)[0]))
        response.mimetype = "application/json"
        return response
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
    metrics.DB_TIMEOUTS.inc()
    message = "The database is not answering, try again later"
    api = which_api()
    if api == "storage":
        return render(storage_error(503, Storage.UNAVAILABLE, message))
    code = Rest.DATABASE_UNAVAILABLE if api == "rest" else Auth.DATABASE_UNAVAILABLE
    return render(APIError(503, code, message))


def handle_unexpected(exc):
    """Anything else: a 503 when the database does not answer, a 400 for a query the table API's
    database refused, else a logged, generic 500."""
    api = which_api()
    rest = api == "rest"
    if isinstance(exc, OperationalError) and not_answering(exc):
        log.error("database unavailable on %s %s: %s", request.method, request.path, describe(exc))
        return unavailable()
    if isinstance(exc, PoolTimeout):  # every pooled connection busy for DB_TIMEOUT: a wait, not a bug
        log.error("no pooled database connection free in time on %s %s", request.method, request.path)
        return unavailable()
    if isinstance(exc, OperationalError) and rest:
        # What the query asked that no check above caught (a regular expression MariaDB cannot run, a
        # pattern too long for SQLite): PostgREST answers a database error it has no status for
        # with a 400. Never a 503: the database did answer.
        log.warning("database refused a query on %s %s: %s", request.method, request.path, describe(exc))
        return render(APIError(400, Rest.BAD_QUERY, "The database could not run this query"))
    if isinstance(exc, DataError):
        # A value the database refused (too long, a character its charset lacks) that no check above
        # caught: the client's doing, so a 400, named by the database's code only in the log.
        log.warning("database refused a value on %s %s: %s", request.method, request.path, describe(exc))
        if api == "storage":
            return render(storage_error(400, Storage.INVALID_REQUEST, "A value does not fit its column"))
        code = Rest.INVALID_TEXT if rest else Auth.VALIDATION_FAILED
        return render(APIError(400, code, "A value does not fit its column"))
    log.exception("unexpected error on %s %s", request.method, request.path)
    if api == "storage":
        return render(storage_error(500, Storage.INTERNAL, "Unexpected failure, please try again"))
    code = Rest.UNEXPECTED if rest else Auth.UNEXPECTED_FAILURE
    return render(APIError(500, code, "Unexpected failure, please try again"))


def register(app):
    app.register_error_handler(APIError, render)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)


def string_id_for_sdks(user):
    """`user` as the calling client reads it: an official SDK (it sends an API version header) wants
    the id as a string, a plain client the integer user_id; with UUID_USER_IDS, every client gets
    its UUID form, which the SDKs' admin calls insist on."""
    if current_app._get_current_object().config["UUID_USER_IDS"]:  # as config.setting
        return {**user, "id": tokens.subject(user["id"], uuid_form=True)}
    return {**user, "id": str(user["id"])} if api_version() else user


def session_for_sdks(session):
    """A session object whose user is shaped by string_id_for_sdks."""
    return {**session, "user": string_id_for_sdks(session["user"])}
