"""A worker process: `python -m runner.worker FD` runs one function's module, call after call, under
the limits it is given, talking to the service over the socket FD (runner.wire).

It is told what to boot, sets its limits (address space, CPU seconds per call, no core files, a lower
priority than the service's, death with the service), imports the module and says whether that
worked; then runs each call it is sent and answers head, body pieces and an end. Anything the
function prints or logs is sent with the end, for the service's log; a traceback goes there too,
never into the answer. After a call that left threads or open files behind, it says it is not clean
and the service retires it."""

import ctypes
import importlib.util
import io
import json
import logging
import os
import resource
import signal
import sys
import threading
import traceback

from runner import api, wire

MAX_LOG_LINES = 200  # a call's own log lines kept; past that, one line says how many were dropped
MAX_LINE = 2000  # characters of one log line
PR_SET_PDEATHSIG = 1
NICENESS = 10  # behind the service's own threads when the CPU is short


class Lines(io.TextIOBase):
    """sys.stdout and sys.stderr during a call: what is written, kept as lines (bounded)."""

    def __init__(self):
        self.lines, self.partial, self.dropped = [], "", 0

    def writable(self):
        return True

    def write(self, text):
        self.partial += text
        *complete, self.partial = self.partial.split("\n")
        for line in complete:
            self.keep(line)
        if len(self.partial) > MAX_LINE:
            self.keep(self.partial)
            self.partial = ""
        return len(text)

    def keep(self, line):
        if len(self.lines) < MAX_LOG_LINES:
            self.lines.append(line[:MAX_LINE])
        else:
            self.dropped += 1

    def take(self):
        if self.partial:
            self.keep(self.partial)
            self.partial = ""
        lines, dropped = self.lines, self.dropped
        self.lines, self.dropped = [], 0
        return lines + ([f"({dropped} more lines not kept)"] if dropped else [])


def set_limits(memory):
    """No core files, a lower priority, death with the service, and at most `memory` bytes more
    address space than the worker holds now."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(NICENESS)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the closed socket still ends an idle worker
        pass
    if memory:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (address_space() + memory, resource.RLIM_INFINITY))
        except (OSError, ValueError):  # no /proc (macOS, where RLIMIT_AS is not enforced anyway)
            pass


def address_space():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def limit_cpu(seconds):
    """At most `seconds` more CPU time (SIGXCPU ends the process past it): set before each call."""
    if seconds:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (used + int(seconds), resource.RLIM_INFINITY))


def boot(name, path, functions_dir):
    """Import the function's module; its `handler`."""
    sys.path.append(functions_dir)  # its own helper modules, after the standard library's
    module_name = "minibase_function_" + name.replace("-", "_")
    package = os.path.basename(path) == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        module_name, path, submodule_search_locations=[os.path.dirname(path)] if package else None
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    handler = getattr(module, "handler", None)
    if not callable(handler):
        raise TypeError(f"{path} has no handler(request, caller) function")
    return handler


def leaks():
    """What a call may leave behind: threads, and open files."""
    files = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    return threading.active_count(), len(os.listdir(files))


def shape(result):
    """(status, headers, body, streamed) of what a handler returned."""
    status, headers = 200, {}
    if isinstance(result, api.Response):
        result, status, headers = result.body, result.status, result.headers
    elif isinstance(result, tuple):
        if len(result) == 3:
            result, status, headers = result
        elif len(result) == 2 and isinstance(result[1], dict):
            result, headers = result
        elif len(result) == 2:
            result, status = result
        else:
            raise TypeError("a handler's tuple is (body, status), (body, headers) or (body, status, headers)")
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        # 1xx: no switching protocols (a WebSocket upgrade) over a function's HTTP answer
        raise TypeError(f"a response's status must be an integer from 200 to 599, not {status!r}")
    headers = {str(name): str(value) for name, value in dict(headers or {}).items()}
    named = {name.lower() for name in headers}

    def default_type(value):
        if "content-type" not in named:
            headers["Content-Type"] = value

    if result is None:
        return (204 if status == 200 else status), headers, b"", False
    if isinstance(result, dict | list):
        default_type("application/json")
        return status, headers, json.dumps(result).encode(), False
    if isinstance(result, str):
        default_type("text/plain; charset=utf-8")
        return status, headers, result.encode(), False
    if isinstance(result, bytes | bytearray | memoryview):
        default_type("application/octet-stream")
        return status, headers, bytes(result), False
    if hasattr(result, "__iter__") or hasattr(result, "__aiter__"):
        default_type("application/octet-stream")
        return status, headers, result, True
    raise TypeError(f"a handler cannot return a {type(result).__name__}")


def pieces(body):
    """The chunks of a streamed body, as bytes, from an iterator or an async iterator."""
    if hasattr(body, "__aiter__"):
        import asyncio  # here: a tenth of a second of every worker's start for the functions that need it

        loop = asyncio.new_event_loop()
        iterator = body.__aiter__()
        try:
            while True:
                try:
                    chunk = loop.run_until_complete(iterator.__anext__())
                except StopAsyncIteration:
                    return
                yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        finally:
            loop.close()
    for chunk in body:
        yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)


def failure(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    return "exit" if isinstance(exc, SystemExit | KeyboardInterrupt) else "exception"


def run(conn, handler, call, body, lines):
    """One call: head, body pieces and end sent to the service; a failure as an error message."""
    before = leaks()
    headed = False
    try:
        request = api.Request(call["method"], call["url"], call["path"], call["query"], call["headers"], body)
        caller = api.Caller(**call["caller"])
        result = handler(request, caller)
        if hasattr(result, "__await__"):  # an async def handler
            import asyncio

            result = asyncio.run(_awaited(result))
        status, headers, content, streamed = shape(result)
        wire.say(conn, head={"status": status, "headers": list(headers.items()), "streamed": streamed,
                             "length": None if streamed else len(content)})  # fmt: skip
        headed = True
        if streamed:
            for chunk in pieces(content):
                if chunk:
                    wire.send(conn, chunk)
        else:
            wire.send(conn, content)
    except BaseException as exc:  # noqa: B036 - sys.exit and MemoryError are the function's to answer for
        kind = failure(exc)
        text = "".join(traceback.format_exception(exc))
        lines.write(text if kind != "memory" else "MemoryError: the function passed its memory limit\n")
        wire.say(conn, error=kind, headed=headed, logs=lines.take())
        return False
    wire.say(conn, end=True, logs=lines.take(), clean=leaks() <= before)
    return True


async def _awaited(awaitable):
    return await awaitable


def receive_body(conn, length):
    """The request's body: the pieces the service sends until `length` bytes (one empty piece for
    none)."""
    pieces, received = [], 0
    while True:
        _, piece = wire.hear(conn)
        pieces.append(piece)
        received += len(piece)
        if received >= length:
            return b"".join(pieces)


def main(fd):
    conn = wire.Channel.from_fd(fd)
    lines = Lines()
    sys.stdout = sys.stderr = lines
    logging.basicConfig(stream=lines, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        force=True)  # fmt: skip
    told = wire.hear(conn)[1]
    try:
        set_limits(told["memory"])
        handler = boot(told["name"], told["path"], told["functions_dir"])
    except BaseException as exc:  # noqa: B036 - a module that exits at import failed to boot too
        lines.write("".join(traceback.format_exception(exc)))
        wire.say(conn, boot_error=True, logs=lines.take())
        return
    wire.say(conn, ready=True, logs=lines.take())
    while True:
        try:
            is_control, call = wire.hear(conn)
            body = receive_body(conn, call["length"])
        except (EOFError, OSError):
            return  # the service let this worker go
        limit_cpu(told["cpu"])
        if not run(conn, handler, call["call"], body, lines):
            return


if __name__ == "__main__":
    try:
        main(int(sys.argv[1]))
    finally:
        os._exit(0)  # threads the function left behind do not keep a retired worker alive
