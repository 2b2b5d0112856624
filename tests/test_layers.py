"""The leaves at the top of the project import nothing above them, query/ is pure, and tables_toml/
uses neither the app nor its database. import-linter (`make lint`) checks the packages; it cannot
take single modules as roots, so the leaves' rule, and query/'s own (it may use the leaf values.py,
not the app's extensions or errors), are checked here. An import for annotations only (under
`if TYPE_CHECKING:`) is not a dependency: it never runs."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEAVES = (
    "models",
    "values",
    "encoding",
    "variables",
    "errors",
    "config",
    "extensions",
    "row_policies",
    "metrics",
    "turns",
)
ABOVE = frozenset(
    {
        "app",
        "wsgi",
        "blueprints",
        "runtime",
        "webhooks",
        "live",
        "dashboard",
        "backups",
        "auth",
        "rest",
        "storage",
        "runner",
        "database",
        "tools",
        "query",
        "tables_toml",
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
    """The top-level names of every module `path` imports, wherever the import statement stands,
    but for annotations."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []  # ast.walk has not entered it yet
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0]


@pytest.mark.parametrize(
    "leaf",
    [ROOT / f"{leaf}.py" for leaf in LEAVES if (ROOT / f"{leaf}.py").exists()]
    + sorted(path for leaf in LEAVES for path in (ROOT / leaf).glob("*.py")),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_a_leaf_imports_nothing_above_it(leaf):
    """A leaf is a module at the top, or a package of them (models/)."""
    assert not ABOVE & set(imported(leaf))


@pytest.mark.parametrize("module", sorted((ROOT / "query").glob("*.py")), ids=lambda path: path.stem)
def test_the_query_package_is_pure(module):
    assert not IMPURE & set(imported(module))


@pytest.mark.parametrize("module", sorted((ROOT / "tables_toml").glob("*.py")), ids=lambda path: path.stem)
def test_tables_toml_is_parsed_without_the_app(module):
    """tables.toml is parsed once, before the app exists: its package reads no app, request or database."""
    assert not (ABOVE - {"tables_toml"}) & set(imported(module))
    assert not {"flask", "werkzeug", "extensions"} & set(imported(module))


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from auth import tokens\n")
    assert set(imported(module)) == {"os", "auth"}


def test_the_check_leaves_out_imports_for_annotations_only(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from live import hub\n")
    assert set(imported(module)) == {"typing"}


def test_tables_toml_is_read_in_one_place():
    """Only tables_toml/ parses TOML and only create_app hands it the file's path, so every part of the
    service, the dashboard included, holds what was read once at start. The one other TOML file is
    FUNCTIONS_DIR/config.toml, the functions' own settings, which runner/directory.py reads again
    when it changes, as it does their code."""
    sources = [
        path
        for path in ROOT.rglob("*.py")
        if path.relative_to(ROOT).parts[0] not in ("tests", "tools", "migrations")
        and not path.relative_to(ROOT).parts[0].startswith(".")  # .venv, make bench's .venv-bench
    ]
    parsing = {str(path.relative_to(ROOT)) for path in sources if "tomllib" in set(imported(path))}
    assert parsing == {"tables_toml/__init__.py", "runner/directory.py"}
    naming = {str(path.relative_to(ROOT)) for path in sources if '"TABLES_CONFIG"' in path.read_text()}
    assert naming == {"variables.py", "config.py", "app.py"}  # declared, made absolute, handed over
