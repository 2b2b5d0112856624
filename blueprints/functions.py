"""/functions/v1/NAME[/any/sub/path]: the request handed to function NAME's worker as the client
sent it, and the function's answer sent back as it made it (runner.service).

Who may call is the function's to say, as at Supabase, whose gateway checks no apikey on this path:
`verify_jwt` (on unless the function's config.toml says otherwise) wants a valid bearer token (a
key or a user's token) before the function runs; off, anyone may call, as Stripe or GitHub post a
webhook with no key. An apikey that is sent must be valid either way."""

import jwt
from flask import Blueprint, current_app, request

import metrics
from auth.identity import api_key_role, identify
from blueprints.gateway import bearer_token, refuse_secret_key_in_browser
from errors import APIError
from runner import service
from variables import ConfigError

bp = Blueprint("functions", __name__, url_prefix="/functions/v1")
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@bp.route("/<name>", methods=METHODS)
@bp.route("/<name>/<path:rest>", methods=METHODS)
def invoke(name, rest=None):
    runner = service.functions()
    preflight = request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
    path = runner.find(name)
    if path is None:
        return empty() if preflight else answer(service.failed("NOT_FOUND"))
    try:
        limits = runner.limits(name)
    except ConfigError as exc:
        current_app.logger.error("%s", exc)
        return empty() if preflight else answer(service.failed("BOOT_ERROR"))
    # A preflight carries no credentials: the function sees it as anon, and answers it if it will.
    caller = {"role": "anon"} if preflight else the_caller(limits.verify_jwt)
    body = read_body(current_app.config["FUNCTIONS_MAX_BODY"])
    asked = {
        "method": request.method,
        "url": request.url,
        "path": request.path.removeprefix(bp.url_prefix),
        "query": [[key, value] for key, value in request.args.items(multi=True)],
        "headers": [[key, value] for key, value in request.headers.items()],
        "body": body,
    }
    result = runner.call(name, asked, caller, own_url(), found=(path, limits))
    if preflight and not answers_cors(result):
        if not isinstance(result.body, bytes):
            result.body.close()
        return empty()
    return answer(result)


def empty():
    """The service's own answer to a preflight: 200, and flask-cors's headers for CORS_ORIGINS."""
    return current_app.response_class(status=200)


def answers_cors(result):
    """Whether a function answered a preflight itself: a 2xx with its own Access-Control-Allow-Origin."""
    return 200 <= result.status < 300 and any(
        k.lower() == "access-control-allow-origin" for k, _ in result.headers
    )


# The connection's own headers are the server's to write (a WSGI server refuses them from an app), and
# the length is what is sent, not what a function says it is.
NOT_THE_FUNCTIONS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
     "transfer-encoding", "upgrade", "content-length"}
)  # fmt: skip


def answer(result):
    """The function's answer, or the runner's on its behalf (not found, boot error, a limit), counted
    in metrics.FUNCTION_CALLS."""
    metrics.FUNCTION_CALLS.labels(f"{result.status // 100}xx").inc()
    headers = [(k, v) for k, v in result.headers if k.lower() not in NOT_THE_FUNCTIONS]
    response = current_app.response_class(result.body, status=result.status, headers=headers)
    if not isinstance(result.body, bytes):
        response.direct_passthrough = True  # streamed as the worker sends it
    return response


def unauthorized(code, message):
    """verify_jwt's 401, as the relay in front of Supabase's functions answers it (x-relay-error:
    supabase-js's FunctionsRelayError, never the function's own error)."""
    return APIError(
        401, code, message, headers={"sb-error-code": code, "x-relay-error": "true"}, api="functions"
    )


def the_caller(verify):
    """The caller's role, user id and claims (api.Caller's fields). An apikey, when sent, must be
    valid. With `verify` the bearer token must be valid, or it is a 401 before the function runs;
    without, anyone may call (a Stripe or GitHub webhook sends no key), as the apikey's role or anon."""
    apikey = request.headers.get("apikey") or request.args.get("apikey")
    key_role = None
    if apikey:
        key_role = api_key_role(apikey)
        if key_role is None:
            raise unauthorized("UNAUTHORIZED_INVALID_API_KEY", "Invalid API key")
        refuse_secret_key_in_browser(apikey, request)
    unverified = {"role": key_role or "anon", "apikey": apikey}
    try:
        token = bearer_token()
    except APIError:
        if verify:
            raise unauthorized("UNAUTHORIZED_INVALID_JWT_FORMAT", "Invalid JWT") from None
        return unverified
    if token is None:
        if verify:
            raise unauthorized("UNAUTHORIZED_NO_AUTH_HEADER", "Missing authorization header")
        return unverified
    try:
        refuse_secret_key_in_browser(token, request)
        return {**verified(token), "token": token, "apikey": apikey}
    except APIError:
        if verify:
            raise unauthorized("UNAUTHORIZED_INVALID_JWT", "Invalid JWT") from None
        return unverified


# Claims of the tokens minibase signs with JWT_SECRET for other uses than calling: a session's
# access token (session_id; one whose session has ended fails identify), a refresh token (sid, typ),
# a third-party sign-in's state (typ, flow) and a storage signed URL (url, purpose). None of them is
# a caller's token, and a refresh token names its user for 30 days after a sign-out or a ban.
NOT_A_CALLERS = frozenset({"session_id", "sid", "typ", "flow", "url", "purpose"})


def verified(token):
    """The caller behind a valid token: an API key, a user's live session, or another token signed
    with JWT_SECRET that names no session and was not minted for another use (NOT_A_CALLERS;
    Supabase's relay accepts any token signed with the project's secret), whose role is then anon
    or authenticated, never more. A 401 APIError else."""
    role = api_key_role(token)
    if role is not None:
        return {"role": role, "claims": claims_of(token) or {"role": role}}
    try:
        who = identify(token)
    except APIError:
        try:
            claims = jwt.decode(token, current_app.config["JWT_SECRET"], algorithms=["HS256"],
                                options={"verify_aud": False})  # fmt: skip
        except jwt.PyJWTError:
            raise unauthorized("UNAUTHORIZED_INVALID_JWT", "Invalid JWT") from None
        if not NOT_A_CALLERS.isdisjoint(claims):  # a session's token, or one minted for another use
            raise
        role = "authenticated" if claims.get("role") == "authenticated" else "anon"
        return {"role": role, "claims": claims}
    return {"role": who.role, "user_id": who.user_id, "claims": claims_of(token)}


def claims_of(token):
    """The claims of a token verified already, or {} for a key that is no JWT (sb_…)."""
    try:
        return jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}


def read_body(limit):
    """The request's body, or a 413 past `limit` bytes."""
    request.max_content_length = limit  # FUNCTIONS_MAX_BODY, not the other APIs' MAX_CONTENT_LENGTH
    length = request.content_length
    if length is not None and length > limit:
        raise too_large(limit)
    data = request.stream.read(limit + 1 if length is None else length)  # None: chunked, or no body
    if len(data) > limit:
        raise too_large(limit)
    return data


def too_large(limit):
    message = f"The request body is larger than {limit} bytes"
    return APIError(
        413, "REQUEST_TOO_LARGE", message, headers={"sb-error-code": "REQUEST_TOO_LARGE"}, api="functions"
    )


def own_url():
    """Where this server answers, for a function's SUPABASE_URL: HOST and the port the request came in
    on (never the client's Host header, which would send the service key wherever a client pointed
    it; waitress's SERVER_NAME is a reverse lookup of HOST, which need not resolve back)."""
    environ = request.environ.get("werkzeug.proxy_fix.orig", request.environ)
    host = current_app.config["HOST"]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{environ.get('SERVER_PORT') or current_app.config['PORT']}"
