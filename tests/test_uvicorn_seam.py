"""The seam to uvicorn (runtime/uvicorn_seam.py): each private method and attribute it relies on is
still in the uvicorn installed, none of the names it adds is one of uvicorn's own, and the log line
it filters is still uvicorn's words (a test that fails names the one that changed)."""

import inspect
import re

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
