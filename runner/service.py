"""Running a call: find the function, check its bounds, take or start a worker, hand it the
request, and turn what comes back (or does not) into a Result with Supabase's status codes.

    unknown function              404 NOT_FOUND
    module fails to import        503 BOOT_ERROR
    uncaught exception, sys.exit  500 EDGE_FUNCTION_ERROR (os._exit and crashes too)
    no answer within its timeout  504 IDLE_TIMEOUT
    past its memory or CPU limit  546 WORKER_LIMIT (and too many calls at once)

Each is JSON `{"code", "message"}` with an `sb-error-code` header; the traceback is in the log only.
`invoke` is the entry point for the rest of minibase (webhooks, schedules)."""

import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import config
import turns
import variables
from extensions import state
from runner import directory, wire
from runner.journal import Journal
from runner.pool import Pool, Refused

log = logging.getLogger("minibase.functions")
WHOLE_BYTES = 1024 * 1024  # a body up to this is answered whole; a longer or streamed one streams
FAILURES = {
    "NOT_FOUND": (404, "Requested function was not found"),
    "BOOT_ERROR": (503, "Function failed to start (please check logs)"),
    "EDGE_FUNCTION_ERROR": (500, "Function exited due to an error (please check logs)"),
    "IDLE_TIMEOUT": (504, "Function did not answer within its timeout (please check logs)"),
    "WORKER_LIMIT": (546, "Function failed due to not having enough compute resources (please check logs)"),
    "BUSY": (546, "Too many calls of this function at once: try again shortly"),
}


@dataclass
class Result:
    """An answer: `body` is bytes, or an iterator of bytes for a streamed one."""

    status: int
    headers: list = field(default_factory=list)
    body: object = b""
    error_code: str | None = None


def failed(code):
    status, message = FAILURES[code]
    code = "WORKER_LIMIT" if code == "BUSY" else code
    headers = [("Content-Type", "application/json"), ("sb-error-code", code)]
    if status == 546:
        headers.append(("Retry-After", "1"))
    return Result(status, headers, json.dumps({"code": code, "message": message}).encode(), code)


# A database password shorter than this is not taken out of the lines: every such run of letters in
# them would be, and the lines would say nothing.
LEAST_REDACTED = 4


def never_logged(settings, own):
    """What a function's lines never keep, even when it prints them: the service_role key,
    JWT_SECRET, the secret API keys (sb_secret_…, which a caller may send and a function print with
    the request's headers) and the database's password (in SUPABASE_DB_URL, which functions get)."""
    try:
        password = urlsplit(own.get("SUPABASE_DB_URL") or "").password
    except ValueError:
        password = None
    passwords = {password, unquote(password)} if password and len(password) >= LEAST_REDACTED else set()
    return [own.get("SUPABASE_SERVICE_ROLE_KEY"), settings["JWT_SECRET"], *settings["SECRET_KEYS"].values(),
            *passwords]  # fmt: skip


class Functions:
    """The service's functions: its settings, its worker pool and its journal of calls. `own` is the
    environment the project gives every function under Supabase's names."""

    def __init__(self, settings, own):
        self.directory = Path(settings["FUNCTIONS_DIR"])
        self.env_file = settings["FUNCTIONS_ENV_FILE"]
        self.max_calls = settings["FUNCTIONS_MAX_CALLS"]
        limit = settings["FUNCTIONS_CONCURRENCY"] or max(1, settings["THREADS"] // 2)
        self.defaults = directory.Limits(
            verify_jwt=True,
            timeout=settings["FUNCTIONS_TIMEOUT"],
            memory=settings["FUNCTIONS_MEMORY"],
            cpu=settings["FUNCTIONS_CPU"],
            concurrency=max(1, limit // 2),
        )
        self.own = own
        self.pool = Pool(limit, config.ROOT)
        self.journal = Journal(never_logged(settings, own))

    def limits(self, name):
        return directory.settings_of(self.directory, name, self.defaults)

    def find(self, name):
        """The module of function `name`, or None (directory.module_path)."""
        return directory.module_path(self.directory, name)

    def environment(self, url):
        own = {**self.own, "SUPABASE_URL": url or self.own.get("SUPABASE_URL", "")}
        # The service's own settings (JWT_SECRET, SMTP_PASS, S3 keys, …) are not the functions' to read.
        base = {name: value for name, value in os.environ.items() if name not in variables.VARIABLES}
        return directory.environment(base, self.env_file, own)

    def call(self, name, request, caller, url=None, found=None):
        """Call function `name` with `request` (method, url, path, query, headers: lists of pairs) and
        `request_body` bytes in `request["body"]`, as `caller` (api.Caller's fields): a Result. `url`
        is where this service answers, for the function's SUPABASE_URL. `found`: its module and
        Limits, when the caller has looked them up already (find, limits): not looked up twice."""
        started = time.monotonic()
        if found is None:
            path = self.find(name)
            if path is None:
                return self.done(name, request["method"], started, failed("NOT_FOUND"), [])
            try:
                limits = self.limits(name)
            except variables.ConfigError as exc:
                log.error("%s", exc)
                return self.done(name, request["method"], started, failed("BOOT_ERROR"), [])
        else:
            path, limits = found
        try:
            self.pool.enter(name, limits.concurrency)
        except Refused:
            return self.done(name, request["method"], started, failed("BUSY"), [])
        call = Call(self, name, path, limits, request, caller, url, started)
        try:
            return call.start()
        except BaseException:
            call.finish(None, failed("EDGE_FUNCTION_ERROR"), [])
            raise

    def done(self, name, method, started, result, lines):
        self.journal.record(name, method, result.status, time.monotonic() - started, result.error_code, lines)
        return result

    def close(self):
        self.pool.close()


class Call:
    """One call on its way: the worker it holds, until finish() gives it back or kills it."""

    def __init__(self, functions, name, path, limits, request, caller, url, started):
        self.functions, self.name, self.path, self.limits = functions, name, path, limits
        self.request, self.caller, self.url, self.started = request, caller, url, started
        self.key, self.worker, self.finished, self.lines = None, None, False, []
        self.since = started  # what the timeout counts from: the call's start, then each piece's

    def remaining(self):
        return self.since + self.limits.timeout - time.monotonic()

    def start(self):
        functions = self.functions
        version = (directory.version(self.path), directory.file_version(functions.env_file))
        key = (self.name, *version, self.limits)
        self.key, self.worker = key, functions.pool.take(key)
        if self.worker is None:
            self.worker, problem = self.new_worker()
            if problem is not None:
                kind, lines = problem
                code = "IDLE_TIMEOUT" if kind == "timeout" else "BOOT_ERROR"
                return self.finish(None, failed(code), lines)
        request = {key: value for key, value in self.request.items() if key != "body"}
        try:
            body = self.request["body"] or b""
            wire.say(self.worker.conn, call={**request, "caller": self.caller}, length=len(body))
            wire.send(self.worker.conn, body)
        except OSError:
            return self.finish(False, self.death(), [])
        said = self.hear()
        if isinstance(said, Result):
            return said
        head = said["head"]
        headers = [(str(k), str(v)) for k, v in head["headers"]]
        result = Result(head["status"], headers)
        length = head.get("length")
        if not head.get("streamed") and length is not None and length <= WHOLE_BYTES:
            parts = []
            while True:
                said = self.hear()
                if isinstance(said, Result):
                    return said
                if isinstance(said, bytes):
                    parts.append(said)
                    continue
                result.body = b"".join(parts)
                return self.finish(said.get("clean", False), result, said.get("logs") or [])
        result.body = Streamed(self, result)
        return result

    def new_worker(self):
        """A new worker for this call's function, version and limits: Pool.start's answer."""
        functions, limits = self.functions, self.limits
        environment = functions.environment(self.url)
        return functions.pool.start(
            self.key, self.path, functions.directory, limits.memory, limits.cpu, environment, limits.timeout
        )

    def hear(self):
        """The worker's next message (a dict, or bytes of the body), or the failed Result when it did
        not answer in time, died, or reported an error."""
        worker = self.worker
        try:
            with turns.waiting():  # on the function's process: another request may run
                answered = worker.wait(min(self.remaining(), self.limits.timeout))
            if not answered:
                return self.finish(False, failed("IDLE_TIMEOUT"), [])
            is_control, said = wire.hear(worker.conn)
        except (EOFError, OSError, ValueError):
            return self.finish(False, self.death(), [])
        if not is_control:
            return said
        if "error" in said:
            code = "WORKER_LIMIT" if said["error"] == "memory" else "EDGE_FUNCTION_ERROR"
            return self.finish(False, failed(code), said.get("logs") or [])
        return said

    def death(self):
        """What a worker that stopped answering died of: its CPU or memory limit, or anything else."""
        ended = self.worker.ended()
        if ended in (-signal.SIGXCPU, -signal.SIGKILL):
            return failed("WORKER_LIMIT")
        return failed("EDGE_FUNCTION_ERROR")

    def finish(self, reusable, result, lines):
        """Give the worker back (reusable: its call ended cleanly) or kill it; count the call out,
        and journal it. Returns `result`."""
        if self.finished:
            return result
        self.finished = True
        functions = self.functions
        if self.worker is not None:
            if reusable:
                self.worker.calls += 1
                functions.pool.give_back(
                    self.worker, functions.max_calls, self.limits.concurrency, self.new_worker
                )
            else:
                self.worker.kill()
        functions.pool.leave(self.name)
        elapsed = time.monotonic() - self.started
        functions.journal.record(self.name, self.request["method"], result.status, elapsed,
                                 result.error_code, lines)  # fmt: skip
        return result


class Streamed:
    """A streamed body: the pieces as the worker sends them, each within the function's timeout of
    the one before. Closed (by the server, at the end or when the client goes away), it ends the
    call: a worker still sending is killed."""

    def __init__(self, call, result):
        self.call, self.result, self.clean, self.ended = call, result, False, False

    def __iter__(self):
        return self

    def __next__(self):
        call = self.call
        if self.ended:
            raise StopIteration
        call.since = time.monotonic()
        said = call.hear()
        if isinstance(said, bytes):
            return said
        self.ended = True
        if not isinstance(said, Result):
            self.clean = said.get("clean", False)
            call.lines = said.get("logs") or []
        else:  # the status is sent already: the error is the log's
            self.result = Result(self.result.status, self.result.headers, b"", said.error_code)
        self.close()
        raise StopIteration

    def close(self):
        self.call.finish(self.clean and self.ended, self.result, self.call.lines)


def functions():
    """This app's Functions."""
    return state().function_runner


def invoke(name, body=None, *, method="POST", headers=None):
    """Run function `name` as the service (service_role) and return (status, body bytes): the entry
    point for webhooks' and schedules' `function = "NAME"` targets. `body` is sent as JSON (None: no
    body); `headers` are added to the request. Needs the app's context (app.app_context()); the call
    is bounded by the function's timeout like any other, and its failures are Supabase's statuses
    (404 unknown, 500, 503, 504, 546), never an exception. A streamed answer is read whole."""
    runner = functions()
    key = runner.own["SUPABASE_SERVICE_ROLE_KEY"]
    data = b"" if body is None else json.dumps(body).encode()
    sent = [("Content-Type", "application/json")] if body is not None else []
    sent += list((headers or {}).items())
    request = {"method": method, "url": f"/functions/v1/{name}", "path": f"/{name}", "query": [],
               "headers": sent, "body": data}  # fmt: skip
    caller = {"role": "service_role", "user_id": None, "claims": {"role": "service_role"}, "token": key,
              "apikey": key}  # fmt: skip
    result = runner.call(name, request, caller)
    if isinstance(result.body, bytes):
        return result.status, result.body
    try:
        return result.status, b"".join(result.body)
    finally:
        result.body.close()
