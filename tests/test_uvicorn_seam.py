"""The seam to uvicorn (runtime/uvicorn_seam.py): each private method and attribute it relies on is
still in the uvicorn installed, none of the names it adds is one of uvicorn's own, and the log line
it filters is still uvicorn's words (a test that fails names the one that changed)."""

import asyncio
import inspect
import os
import re
import socket
import threading
import time
import types
from pathlib import Path

import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.websockets import websockets_sansio_impl

from runtime import uvicorn_seam

CLASSES = {
    "HttpToolsProtocol": HttpToolsProtocol,
    "RequestResponseCycle": RequestResponseCycle,
    "FlowControl": FlowControl,
    "Server": uvicorn.Server,
    "WebSocketsSansIOProtocol": websockets_sansio_impl.WebSocketsSansIOProtocol,
}


def source(cls):
    return "".join(inspect.getsource(base) for base in cls.__mro__ if base.__module__.startswith("uvicorn"))


def sets(cls, name):
    """Whether uvicorn's `cls` (or a base of it in uvicorn) has `name`: a method, or an attribute
    its code sets."""
    return hasattr(cls, name) or re.search(rf"self\.{name}\b\s*(:[^=\n]+)?=", source(cls)) is not None


@pytest.mark.parametrize(
    ("owner", "name"),
    [(owner, name) for owner, used in uvicorn_seam.RELIES_ON.items() for name in used["methods"]],
)
def test_uvicorn_still_has_each_method_the_seam_uses(owner, name):
    assert callable(getattr(CLASSES[owner], name, None)), (
        f"uvicorn's {owner}.{name} is gone: runtime/uvicorn_seam.py relies on it"
    )


@pytest.mark.parametrize(
    ("owner", "name"),
    [(owner, name) for owner, used in uvicorn_seam.RELIES_ON.items() for name in used["attributes"]],
)
def test_uvicorn_still_sets_each_attribute_the_seam_uses(owner, name):
    assert sets(CLASSES[owner], name), (
        f"uvicorn's {owner} no longer sets {name}: runtime/uvicorn_seam.py reads it"
    )


@pytest.mark.parametrize(
    ("owner", "name"), [(owner, name) for owner, added in uvicorn_seam.ADDED.items() for name in added]
)
def test_no_name_the_seam_adds_is_uvicorns_own(owner, name):
    assert not sets(CLASSES[owner], name), (
        f"uvicorn's {owner} has a {name} of its own now: the seam's would hide it"
    )


def test_the_seam_says_what_it_adds():
    """Every attribute the seam's subclasses set, or method they define, that uvicorn's classes lack
    is listed in ADDED (so the test above sees each)."""
    mine = {"HttpToolsProtocol": uvicorn_seam.Protocol, "RequestResponseCycle": uvicorn_seam.Cycle,
            "Server": uvicorn_seam.Server}  # fmt: skip
    for owner, cls in mine.items():
        text = inspect.getsource(cls)
        names = set(re.findall(r"self\.(\w+)\s*=", text)) | set(
            re.findall(r"^    (?:async )?def (\w+)", text, re.M)
        )
        names |= {
            name for name, value in vars(cls).items() if not name.startswith("__") and not callable(value)
        }
        own = {name for name in names if not sets(CLASSES[owner], name)}
        assert own <= set(uvicorn_seam.ADDED[owner]), own - set(uvicorn_seam.ADDED[owner])


def test_the_log_line_the_seam_filters_is_uvicorns():
    assert uvicorn_seam.UNFINISHED_HANDSHAKE in inspect.getsource(websockets_sansio_impl)


def test_the_connection_limit_is_uvicorns_documented_setting():
    config = inspect.signature(uvicorn.Config).parameters
    assert "limit_concurrency" in config and "backlog" in config


def test_only_the_seams_reach_into_uvicorn_and_pymysql():
    """No other module of the service imports uvicorn, nor PyMySQL's modules beyond its documented
    API (connect, cursors, converters, errors, constants): its connection and protocol internals
    are database/pymysql_seam.py's alone."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    internal = {"uvicorn": r"uvicorn\b", "pymysql": r"pymysql\.(connections|protocol)\b"}
    found = {}
    for path in root.rglob("*.py"):
        top = path.relative_to(root).parts[0]
        if top in ("tests", "tools", "migrations") or top.startswith("."):  # .venv, .venv-bench
            continue
        text = path.read_text()
        for library, pattern in internal.items():
            if re.search(rf"^\s*(import|from) {pattern}", text, re.M):
                found.setdefault(library, set()).add(str(path.relative_to(root)))
    assert found == {"uvicorn": {"runtime/uvicorn_seam.py"}, "pymysql": {"database/pymysql_seam.py"}}


def cpu_seconds(thread_id):
    """The CPU time the thread `thread_id` (a native id of this process) has used."""
    fields = Path(f"/proc/self/task/{thread_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class NoRealtime:
    """The Realtime server a seam Server stops before it drains, with no socket to close."""

    hub = types.SimpleNamespace(connections=())

    async def stop(self):
        pass


async def lifespan(receive, send):
    """ASGI's lifespan, started and shut down."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def serves_nothing(scope, receive, send):
    await lifespan(receive, send)


def test_a_worker_stops_watching_the_shared_listener_before_it_closes_it():
    """Under WORKERS each worker's loop watches the listener the workers share. Stopping, a worker
    closed its copy while its accept task, only just cancelled, still watched it: the descriptor
    was gone but the other workers' copies kept the socket in the loop's epoll, which then reported
    a connection waiting, to no reader, on every turn, and the loop spun through the drain."""
    listener = socket.create_server(("127.0.0.1", 0))
    sibling = listener.dup()  # another worker's copy: the socket stays open when this one closes
    port = listener.getsockname()[1]
    answering = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        answering.set()
        await asyncio.sleep(2)  # a request in flight: the drain waits for it
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    stop = threading.Event()
    config = uvicorn.Config(app, loop="asyncio", lifespan="on", log_config=None, access_log=False)
    server = uvicorn_seam.Server(config, NoRealtime(), stop, share=lambda held: held < 1)  # takes one
    server.sockets = [listener]
    serving = threading.Thread(target=uvicorn_seam.run, args=(server,))
    clients = [socket.create_connection(("127.0.0.1", port))]
    try:
        serving.start()
        clients[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answering.wait(10)
        time.sleep(0.2)  # nothing waits to be accepted: the accept task watches the listener
        stop.set()  # the drain: the listener closed, the request in flight finished
        time.sleep(0.4)
        # a connection comes to the socket the other workers still hold open
        clients.append(socket.create_connection(("127.0.0.1", port)))
        before = cpu_seconds(serving.native_id)
        time.sleep(1)
        assert cpu_seconds(serving.native_id) - before < 0.2  # a whole second of it before
        assert clients[0].recv(1024).startswith(b"HTTP/1.1 200")
        serving.join(10)
        assert not serving.is_alive()
    finally:
        stop.set()
        for client in clients:
            client.close()
        sibling.close()


def test_a_worker_whose_accepting_fails_stops_and_is_replaced(caplog):
    """A worker's accept task that ended by an error (a protocol that cannot be made, say) left the
    worker serving what it held and publishing ever fewer connections, so the other workers held
    back from every new one for it. It now stops: it drains and exits, and its parent starts
    another (runtime/workers.py)."""

    class Broken(uvicorn_seam.Protocol):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("no protocol")

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    config = uvicorn.Config(serves_nothing, loop="asyncio", lifespan="on", log_config=None, http=Broken)
    server = uvicorn_seam.Server(config, NoRealtime(), stop, share=lambda held: True)
    server.sockets = [listener]
    serving = threading.Thread(target=uvicorn_seam.run, args=(server,))
    serving.start()
    try:
        with socket.create_connection(listener.getsockname()):
            assert stop.wait(10)  # set by the failure, not by a signal
            serving.join(10)
        assert not serving.is_alive()
        assert "accepting connections failed: this worker stops" in caplog.text
    finally:
        stop.set()
        serving.join(10)
