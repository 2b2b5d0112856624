"""The leaves at the top of the project import nothing above them, and query/ is pure. import-linter
(`make lint`) checks the packages; it cannot take single modules as roots, so the leaves' rule, and
query/'s own (it may use the leaf values.py, not the app's extensions or errors), are checked here."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEAVES = ("models", "values", "errors", "config", "extensions", "row_policies")
ABOVE = frozenset(
    {
        "app",
        "wsgi",
        "blueprints",
        "runtime",
        "live",
        "dashboard",
        "auth",
        "rest",
        "storage",
        "database",
        "tools",
        "query",
    }
)
# What a pure module may not use: the app, its settings, its database session, Flask.
IMPURE = (ABOVE - {"query"}) | {
    "models",
    "errors",
    "config",
    "extensions",
    "row_policies",
    "flask",
    "werkzeug",
}


def imported(path):
    """The top-level names of every module `path` imports, wherever the import statement stands."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0]


@pytest.mark.parametrize("leaf", LEAVES)
def test_a_leaf_imports_nothing_above_it(leaf):
    assert not ABOVE & set(imported(ROOT / f"{leaf}.py"))


@pytest.mark.parametrize("module", sorted((ROOT / "query").glob("*.py")), ids=lambda path: path.stem)
def test_the_query_package_is_pure(module):
    assert not IMPURE & set(imported(module))


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from auth import tokens\n")
    assert set(imported(module)) == {"os", "auth"}
