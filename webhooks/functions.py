"""A webhook's or schedule's `function = "NAME"` target: the function run as the service with a JSON
body (runner.service.invoke), its answer judged as a URL's is: a 2xx is done, anything else failed."""

import time

from extensions import state
from runner import service
from variables import ConfigError
from webhooks import sending

ANSWER_CHARS = 200  # what an error keeps of the function's answer


def call(name, body):
    """Run function `name` with `body` as the service, in the app's context: the Outcome."""
    started = time.monotonic()
    if state().function_runner is None:
        return sending.Outcome(None, "functions are off (FUNCTIONS=off)", 0)
    status, answer = service.invoke(name, body)
    error = None
    if not 200 <= status < 300:
        said = answer[:ANSWER_CHARS].decode("utf-8", "replace").strip()
        error = f"function {name} answered {status}" + (f": {said}" if said else "")
    return sending.Outcome(status, error, round((time.monotonic() - started) * 1000))


def timeout(name, default):
    """How long a call of function `name` may take (its own timeout, else FUNCTIONS_TIMEOUT): what
    a delivery's lease must outlast."""
    runner = state().function_runner
    if runner is None:
        return default
    try:
        return runner.limits(name).timeout
    except ConfigError:
        return default
