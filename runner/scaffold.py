"""`flask --app app functions new NAME`: a first function that works as written."""

from pathlib import Path

from runner import directory

TEMPLATE = '''"""{name}: served at /functions/v1/{name} (docs/functions.md says what a function may use)."""


def handler(request, caller):
    """`request`: method, url, path, query, headers, body (bytes), json(), text(), form().
    `caller`: role (anon, authenticated, service_role), user_id, claims; caller.client() calls
    this minibase's APIs as the caller, runner.api.service() as the service."""
    sent = request.json() if request.content_type == "application/json" else None
    name = (sent or {{}}).get("name") or request.query.get("name") or "world"
    print(f"{{name}} greeted by {{caller.role}}")  # in the service's log and on the dashboard
    return {{"message": f"Hello {{name}}!"}}
'''


class Refused(ValueError):
    """The name cannot be a function, or one of that name exists."""


def write(functions_dir, name):
    """Write FUNCTIONS_DIR/NAME.py from TEMPLATE; its path."""
    if not directory.NAME.fullmatch(name):
        raise Refused(
            f"{name!r} is not a function name: letters, digits, _ and -, starting with a letter or digit"
        )
    folder = Path(functions_dir)
    if directory.module_path(folder, name) is not None:
        raise Refused(f"function {name} exists already")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    with open(path, "x") as module:
        module.write(TEMPLATE.format(name=name))
    return path
