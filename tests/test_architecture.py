"""docs/architecture.md's module map names every module of the service, and only modules that
exist: a module added, renamed or removed without its line there fails here. The service's
modules are the top-level ones and those of the packages import-linter checks (pyproject.toml's
root_packages); a package's __init__.py may be listed, and need not be."""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"


def service_modules():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    found = {path.name for path in ROOT.glob("*.py")}
    for package in packages:
        found |= {str(path.relative_to(ROOT)) for path in (ROOT / package).rglob("*.py")}
    return found


def mapped():
    """The modules the map's table rows name in their first cell."""
    section = PAGE.read_text().split("## The module map", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| ([^|]+) \|", section, re.M)
    return {name for cell in cells for name in re.findall(r"`([\w/]+\.py)`", cell)}


def test_every_module_of_the_service_is_on_the_map():
    missing = sorted(name for name in service_modules() - mapped() if not name.endswith("__init__.py"))
    assert not missing, f"add a line for each to docs/architecture.md's module map: {missing}"


def test_every_module_on_the_map_exists():
    gone = sorted(name for name in mapped() if not (ROOT / name).exists())
    assert not gone, f"docs/architecture.md's module map names modules that do not exist: {gone}"


def test_the_map_is_read():
    assert len(mapped()) > 100 and "tables_toml/__init__.py" in mapped()


def test_every_path_the_code_and_docs_name_exists():
    """A comment, docstring or page that names a module of the service by its path
    (`live/changes.py`) names one that exists."""
    packages = {name.split("/")[0] for name in service_modules() if "/" in name}
    module = re.compile(r"(?<![\w./-])((?:[a-z_]+/)+[a-z_0-9]+\.py)\b(?!\.)")
    stale = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts  # not .venv, .venv-bench, .git, a suite's .source
        hidden = "node_modules" in parts or any(part.startswith(".") for part in parts)
        if path.suffix not in (".py", ".md") or hidden:
            continue
        for named in module.findall(path.read_text(errors="replace")):
            if named.split("/")[0] in packages and not (ROOT / named).exists():
                stale.append(f"{path.relative_to(ROOT)} names {named}")
    assert not stale, stale


def test_no_test_module_imports_another():
    """What two test modules share lives in support.py, a fixture or a helper module (phoenix.py),
    never in a test module another imports: that would run its tests' module-level code twice
    and tie one file's tests to another's."""
    importing = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        for module in re.findall(r"^\s*(?:from|import) ([\w.]+)", path.read_text(), re.M):
            if module.rpartition(".")[2].startswith("test_"):
                importing.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not importing, importing


def test_one_module_commits():
    """Every commit of the service goes through database/transactions.py. The one other `.commit()`
    is in the PyMySQL seam's override of the connection's commit: PyMySQL's own COMMIT, called by
    whoever commits that connection (transactions.py, through SQLAlchemy)."""
    committing = []
    for name in sorted(service_modules()):
        tree = ast.parse((ROOT / name).read_text())
        for node in ast.walk(tree):
            if name == "database/pymysql_seam.py" and getattr(node, "name", None) == "commit":
                node.body = []  # ast.walk below no longer enters it
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "commit":
                committing.append(f"{name}:{node.lineno}")
    assert committing, "the check finds no commit at all"
    assert all(where.startswith("database/transactions.py:") for where in committing), committing
