"""Auth hooks over HTTP, as GoTrue calls them: a POST of the hook's JSON payload to HOOK_<NAME>_URI,
signed per Standard Webhooks with each of HOOK_<NAME>_SECRETS, answered within TIMEOUT. What the
hook answers is checked as GoTrue checks it, and every failure (unreachable, slow, an error status,
an answer that is not JSON, an `error` object) is an APIError: the caller refuses what it was about
to do, so a hook that fails never lets a token, a user or a sign-in through."""

import json
import logging
import time
import uuid
from datetime import UTC, datetime

import requests
from standardwebhooks import Webhook

import metrics
import turns
from auth import tokens
from config import setting
from errors import APIError, Auth

log = logging.getLogger("minibase")

# The hooks, and the name GoTrue gives each in its payload's metadata.
NAMES = {
    "custom_access_token": "customize-access-token",
    "send_email": "send-email",
    "before_user_created": "before-user-created",
    "password_verification_attempt": "password-verification",
    "mfa_verification_attempt": "mfa-verification",
}
TIMEOUT = 5.0  # seconds for the whole call, retries included (GoTrue's)
RETRIES = 3  # attempts when the hook cannot be reached at all
BACKOFF = 2.0  # seconds between two of them
RESPONSE_LIMIT = 200 * 1024  # bytes of an answer
REJECT = "reject"
# The claims a customised access token must still carry, and their JSON types (GoTrue's schema).
REQUIRED_CLAIMS = {
    "aud": (str, list),
    "exp": (int,),
    "iat": (int,),
    "sub": (str,),
    "email": (str,),
    "phone": (str,),
    "role": (str,),
    "aal": (str,),
    "session_id": (str,),
    "is_anonymous": (bool,),
}
OPTIONAL_CLAIMS = {
    "jti": (str,),
    "iss": (str,),
    "nbf": (int,),
    "app_metadata": (dict,),
    "user_metadata": (dict,),
    "amr": (list,),
    "client_id": (str,),
}
# Claims minibase relies on to know whose token it is: the hook may read them, not change them.
FIXED_CLAIMS = ("sub", "session_id", "aud", "role", "iss", "iat")


def enabled(name):
    return bool(setting(f"HOOK_{name.upper()}_ENABLED"))


def metadata(name, ip=None):
    data = {"uuid": str(uuid.uuid4()), "time": datetime.now(UTC).isoformat(), "name": NAMES[name]}
    if ip:
        data["ip_address"] = ip
    return data


# What says the hook failed, rather than answered with an error of its own to pass on.
FAILURES = frozenset({Auth.HOOK_TIMEOUT, Auth.HOOK_TIMEOUT_AFTER_RETRY,
                      Auth.HOOK_PAYLOAD_INVALID_CONTENT_TYPE, Auth.HOOK_PAYLOAD_OVER_SIZE_LIMIT,
                      Auth.UNEXPECTED_FAILURE})  # fmt: skip


def call(name, payload):
    """POST `payload` to the hook `name`; its JSON answer (None for 204), or an APIError. Counted in
    the metrics, with its failures."""
    metrics.HOOK_CALLS.labels(name).inc()
    try:
        return _call(name, payload)
    except APIError as exc:
        if exc.error_code in FAILURES or exc.status >= 500:
            metrics.HOOK_FAILURES.labels(name).inc()
        raise


def _call(name, payload):
    uri = setting(f"HOOK_{name.upper()}_URI")
    body = json.dumps(payload, separators=(",", ":"), default=str)
    deadline = time.monotonic() + TIMEOUT
    for attempt in range(RETRIES):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise hook_timeout()
        try:
            with turns.waiting():
                response = requests.post(
                    uri,
                    data=body.encode(),
                    headers=signed_headers(name, body),
                    timeout=remaining,
                    allow_redirects=False,  # a hook answers; it does not send minibase elsewhere
                    stream=True,
                )
        except requests.Timeout:
            log.warning("auth hook %s timed out", name)
            raise hook_timeout() from None
        except requests.RequestException as exc:
            log.warning(
                "auth hook %s could not be reached (attempt %d): %s", name, attempt + 1, type(exc).__name__
            )
            if attempt < RETRIES - 1 and deadline - time.monotonic() > BACKOFF:
                with turns.waiting():
                    time.sleep(BACKOFF)
                continue
            raise APIError(
                422, Auth.HOOK_TIMEOUT_AFTER_RETRY, "Failed to reach hook after maximum retries"
            ) from None
        with response, turns.waiting():  # the body is read as it comes
            answer = _answer(name, response, deadline)
        if answer is not RETRY:
            return answer
    raise unexpected("Service currently unavailable due to hook")


RETRY = object()


def _answer(name, response, deadline):
    status = response.status_code
    if status == 204:
        return None
    if status in (200, 202):
        media_type = response.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if not media_type:
            raise bad_content_type("Invalid Content-Type: Missing Content-Type header")
        if media_type != "application/json":
            raise bad_content_type(f"Invalid JSON response. Received content-type: {media_type}")
        raw = _read(response, deadline)
        try:
            answer = json.loads(raw)
        except ValueError:
            log.warning("auth hook %s answered with text that is not JSON", name)
            raise unexpected("Error unmarshaling JSON output.") from None
        _raise_its_error(answer)
        return answer
    if status in (429, 503) and response.headers.get("Retry-After"):
        return RETRY
    log.warning("auth hook %s answered %d", name, status)
    if status in (429, 503):
        raise unexpected("Service currently unavailable due to hook")
    if status == 400:
        raise unexpected("Invalid payload sent to hook")
    if status == 401:
        raise unexpected("Hook requires authorization token")
    raise unexpected(f"Unexpected status code returned from hook: {status}")


def _read(response, deadline):
    """The answer's bytes, at most RESPONSE_LIMIT of them, read before the deadline."""
    chunks, size = [], 0
    for chunk in response.iter_content(chunk_size=16384):
        size += len(chunk)
        if size > RESPONSE_LIMIT:
            raise APIError(
                422,
                Auth.HOOK_PAYLOAD_OVER_SIZE_LIMIT,
                f"Payload size exceeded size limit of {RESPONSE_LIMIT} bytes",
            )
        if time.monotonic() > deadline:
            raise hook_timeout()
        chunks.append(chunk)
    return b"".join(chunks)


def _raise_its_error(answer):
    """A hook refuses with {"error": {"http_code": 4xx, "message": "…"}}: that status and message."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str) or not error["message"]:
        return
    status = error.get("http_code")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        status = 500
    code = Auth.UNEXPECTED_FAILURE if status >= 500 else Auth.UNKNOWN
    raise APIError(status, code, error["message"])


def signed_headers(name, body):
    """Standard Webhooks' headers: an id, the time, and a signature per secret (space-separated,
    as the scheme lists them)."""
    message_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    signatures = [
        Webhook(secret.removeprefix("v1,")).sign(message_id, now, body)
        for secret in setting(f"HOOK_{name.upper()}_SECRETS")
    ]
    return {
        "Content-Type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(signatures),
        "Accept-Encoding": "identity",
    }


def hook_timeout():
    return APIError(
        422, Auth.HOOK_TIMEOUT, f"Failed to reach hook within maximum time of {TIMEOUT:f} seconds"
    )


def bad_content_type(message):
    return APIError(400, Auth.HOOK_PAYLOAD_INVALID_CONTENT_TYPE, message)


def unexpected(message):
    return APIError(500, Auth.UNEXPECTED_FAILURE, message)


# --- the hooks


def customize_access_token(user_id_text, claims, method):
    """The claims the custom_access_token hook approves, checked: GoTrue's required claims present
    and of their types, and the claims that say whose token it is unchanged. None of it, no token."""
    payload = {
        "metadata": metadata("custom_access_token"),
        "user_id": user_id_text,
        "claims": claims,
        "authentication_method": method,
    }
    answer = call("custom_access_token", payload)
    if not isinstance(answer, dict) or "claims" not in answer:
        raise unexpected("output claims field is missing")
    changed = answer["claims"]
    if not isinstance(changed, dict):
        raise unexpected("output claims do not conform to the expected schema: claims is not an object")
    problems = [
        f"- {claim}: {'is required' if claim not in changed else 'has the wrong type'}"
        for claim, types in REQUIRED_CLAIMS.items()
        if claim not in changed or not _typed(changed[claim], types)
    ]
    problems += [
        f"- {claim}: has the wrong type"
        for claim, types in OPTIONAL_CLAIMS.items()
        if claim in changed and not _typed(changed[claim], types)
    ]
    problems += [
        f"- {claim}: may not be changed" for claim in FIXED_CLAIMS if changed.get(claim) != claims.get(claim)
    ]
    if not problems and changed["exp"] > claims["exp"]:
        problems.append("- exp: may not be later than the token's own")
    if problems:
        log.warning(
            "auth hook custom_access_token answered claims that do not conform: %s", " ".join(problems)
        )
        raise unexpected("output claims do not conform to the expected schema: \n" + "\n".join(problems))
    return changed


def _typed(value, types):
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is no integer
    return isinstance(value, types)


def before_user_created(user):
    """The before_user_created hook sees the user about to be made; its error vetoes the sign-up."""
    call("before_user_created", {"metadata": metadata("before_user_created"), "user": user})


def send_email(user, email_data):
    """The send_email hook sends the mail instead of SMTP; its failure fails the request."""
    call("send_email", {"metadata": metadata("send_email"), "user": user, "email_data": email_data})


def password_verification_attempt(user_id_text, valid, ip):
    """(rejected, message, should_logout_user) of the password_verification_attempt hook."""
    payload = {
        "metadata": metadata("password_verification_attempt", ip),
        "user_id": user_id_text,
        "valid": valid,
    }
    answer = _decision(call("password_verification_attempt", payload), should_logout_user=bool)
    if answer.get("decision") != REJECT:
        return False, None, False
    message = answer.get("message") or "Further password verification attempts will be rejected."
    return True, message, answer.get("should_logout_user") is True


def mfa_verification_attempt(user_id_text, factor_id, valid, ip):
    """(rejected, message) of the mfa_verification_attempt hook."""
    payload = {
        "metadata": metadata("mfa_verification_attempt", ip),
        "user_id": user_id_text,
        "factor_id": factor_id,
        "factor_type": "totp",
        "valid": valid,
    }
    answer = _decision(call("mfa_verification_attempt", payload))
    if answer.get("decision") != REJECT:
        return False, None
    return True, answer.get("message") or "Further MFA verification attempts will be rejected."


def _decision(answer, **more):
    """A verification hook's answer: {"decision": "reject" | "continue", "message", …}, each field of
    its type (an answer GoTrue could not read into its struct is the same 500); none: continue."""
    answer = {} if answer is None else answer
    fields = {"decision": str, "message": str, **more}
    if not isinstance(answer, dict) or any(
        name in answer and answer[name] is not None and not isinstance(answer[name], kind)
        for name, kind in fields.items()
    ):
        raise unexpected("Error unmarshaling JSON output.")
    return answer


def subject(user_id):
    return tokens.subject(user_id, setting("UUID_USER_IDS"))
