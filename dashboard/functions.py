"""The dashboard's Functions page: the functions in FUNCTIONS_DIR with their settings, and the recent
calls this process answered, each with its log lines (runner.journal)."""

import datetime

from extensions import state
from runner import directory
from variables import ConfigError


def overview(function=None):
    """{"on", "functions": [name, settings or error], "calls": the recent calls, newest first, of
    `function` when named}."""
    runner = state().function_runner
    if runner is None:
        return {"on": False, "functions": [], "calls": []}
    names = sorted(
        name
        for name in (path.stem if path.suffix == ".py" else path.name for path in listing(runner.directory))
        if directory.module_path(runner.directory, name) is not None
    )
    functions = []
    for name in names:
        try:
            functions.append({"name": name, "limits": runner.limits(name), "error": None})
        except ConfigError as exc:
            functions.append({"name": name, "limits": None, "error": str(exc)})
    calls = [{**call, "time": stamp(call["at"])} for call in runner.journal.recent(function)]
    return {"on": True, "functions": functions, "calls": calls}


def listing(folder):
    try:
        return list(folder.iterdir())
    except OSError:  # no FUNCTIONS_DIR yet
        return []


def stamp(at):
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
