"""The leaves at the top of the project import nothing above them. import-linter (`make lint`) checks
the packages; it cannot take single modules as roots, so the leaves' rule is checked here."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEAVES = ("models", "filters", "values", "errors", "config", "extensions", "row_policies")
ABOVE = frozenset(
    {"app", "wsgi", "blueprints", "runtime", "live", "auth", "rest", "storage", "database", "tools"}
)


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


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from auth import tokens\n")
    assert set(imported(module)) == {"os", "auth"}
