"""One POST of a webhook or a schedule's call, signed as Standard Webhooks (`webhook-id`,
`webhook-timestamp`, `webhook-signature`), and what came of it. The id is the delivery's own, the
same on every attempt, so a receiver can drop a second copy of a message it already took."""

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import requests
from standardwebhooks import Webhook

log = logging.getLogger("minibase")
USER_AGENT = "minibase-webhooks"
ERROR_CHARS = 500  # what an attempt's error keeps


@dataclass(frozen=True)
class Outcome:
    status: int | None  # the answer's HTTP status; None: no answer
    error: str | None
    duration_ms: int

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300


def body_of(payload):
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def signed_headers(secret, message_id, body, moment=None):
    """Standard Webhooks' headers for `body` (bytes) under `secret` (whsec_…, v1, optional)."""
    moment = moment or datetime.now(UTC)
    signature = Webhook(secret.removeprefix("v1,")).sign(message_id, moment, body.decode())
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
    }


def post(url, body, headers, secret, message_id, timeout):
    """POST `body` to `url`: the Outcome, never an exception. Redirects are not followed (a target
    answers; it does not send the change elsewhere), the answer's body is not read."""
    sent = {**headers, **signed_headers(secret, message_id, body)}
    started = time.monotonic()
    try:
        with requests.post(
            url, data=body, headers=sent, timeout=timeout, allow_redirects=False, stream=True
        ) as response:
            status, error = response.status_code, None
            if not 200 <= status < 300:
                error = f"answered {status} {response.reason or ''}".strip()
    except requests.Timeout:
        status, error = None, f"no answer within {timeout:g} s"
    except requests.RequestException as exc:
        status, error = None, f"{type(exc).__name__}: {_reason(exc)}"
    return Outcome(status, error[:ERROR_CHARS] if error else None, round((time.monotonic() - started) * 1000))


def _reason(exc):
    """The innermost cause's words (connection refused, name not known), without the URL's query."""
    while exc.__context__ is not None and exc.__context__ is not exc:
        exc = exc.__context__
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
