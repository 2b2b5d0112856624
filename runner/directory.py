"""FUNCTIONS_DIR: which module a name is, its version, the per-function settings of its config.toml
(Supabase's `[functions.NAME]` of supabase/config.toml), and the environment a worker gets.

A name is `[A-Za-z0-9_-]`, at most 64 characters, not starting with `_` (a folder such as `_shared`
holds helpers, as at Supabase) or `-`; it is `NAME.py` or `NAME/__init__.py` directly in
FUNCTIONS_DIR, and its real path must be inside FUNCTIONS_DIR. Nothing else is ever imported."""

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values

import variables

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
SETTINGS_FILE = "config.toml"
KNOWN = {"verify_jwt", "timeout", "memory", "cpu", "concurrency"}


@dataclass(frozen=True)
class Limits:
    verify_jwt: bool
    timeout: float  # seconds without an answer: 504
    memory: int  # bytes of address space past the worker's own: 546
    cpu: int  # CPU seconds per call: 546
    concurrency: int  # calls at once in one process: 546 past it


def module_path(directory, name):
    """The module file of function `name`, or None: no such function, or a name that could be
    anything but one module directly in `directory`."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return None
    # os.path, not pathlib: each call of a function looks its module up, and pathlib's resolve()
    # made this a tenth of the service's own work for a call.
    root = os.path.realpath(directory)
    inside = root.rstrip(os.sep) + os.sep
    for candidate in (f"{name}.py", os.path.join(name, "__init__.py")):
        try:
            real = os.path.realpath(os.path.join(root, candidate), strict=True)
        except OSError:  # no such file, or a loop of links (ELOOP)
            continue
        if real.startswith(inside) and os.path.isfile(real):
            return Path(real)
    return None


def version(path):
    """What changes when the module's code does: the modification times and sizes of its files."""
    files = [path] if path.name != "__init__.py" else sorted(path.parent.rglob("*.py"))
    stamp = []
    for file in files:
        try:
            found = file.stat()
        except OSError:
            continue
        stamp.append((str(file), found.st_mtime_ns, found.st_size))
    return tuple(stamp)


def file_version(path):
    if not path:
        return None
    try:
        found = Path(path).stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


_read = {}  # path -> (version, parsed settings)


def settings_of(directory, name, defaults):
    """The Limits of function `name`: its `[functions.NAME]` in config.toml over `defaults`; a
    ConfigError that says what is wrong with the file."""
    path = Path(directory) / SETTINGS_FILE
    stamp = file_version(path)
    cached = _read.get(str(path))
    if cached is None or cached[0] != stamp:
        cached = (stamp, parse(path) if stamp else {})
        _read[str(path)] = cached
    own = cached[1].get(name, {})
    values = {**defaults.__dict__, **own}
    return Limits(**values)


def parse(path):
    """config.toml's `[functions.NAME]` tables, checked."""
    try:
        document = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise variables.ConfigError(f"{path}: {exc}") from None
    functions = document.get("functions", {})
    if not isinstance(functions, dict):
        raise variables.ConfigError(f"{path}: [functions.NAME] tables are expected")
    parsed = {}
    for name, table in functions.items():
        where = f"{path} [functions.{name}]"
        if not isinstance(table, dict):
            raise variables.ConfigError(f"{where} must be a table")
        unknown = set(table) - KNOWN
        if unknown:
            raise variables.ConfigError(f"{where}: unknown settings {', '.join(sorted(unknown))}")
        parsed[name] = {key: check(where, key, value) for key, value in table.items()}
    return parsed


def check(where, key, value):
    if key == "verify_jwt":
        if not isinstance(value, bool):
            raise variables.ConfigError(f"{where}: verify_jwt must be true or false")
        return value
    if key == "memory":
        size = variables.parse_size(value)
        if not size:
            raise variables.ConfigError(f"{where}: memory must be a size such as 256MB")
        return size
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise variables.ConfigError(f"{where}: {key} must be a positive number")
    if key == "timeout":
        return float(value)
    return max(1, int(value))


def environment(base, env_file, own):
    """A worker's environment: the service's `base` (os.environ), FUNCTIONS_ENV_FILE's variables over
    it, and the project's own under Supabase's names (`own`) where neither set them."""
    merged = dict(base)
    if env_file:
        merged.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    for name, value in own.items():
        merged.setdefault(name, value)
    return merged
