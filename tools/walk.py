"""How a request travels through minibase's own code: the modules it enters, how often control
switches from one module to another, and how many of the project's functions it calls.

    .venv/bin/python tools/walk.py

One warm-up request, then one measured request, for each of: a repeated key read
(GET /rest/v1/items?id=eq.N, its plan cached) and a password sign-in. Frames are counted when their
file is in the project (not the virtualenv, not the tests, not tools/); a switch is a call into a
module from another one (or from Flask, entering the project).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.profile_reads import bench_app  # noqa: E402

SKIP = (str(ROOT / ".venv"), str(ROOT / "tests"), str(ROOT / "tools"))


def project_module(code):
    name = code.co_filename
    if not name.startswith(str(ROOT)) or name.startswith(SKIP):
        return None
    return str(Path(name).relative_to(ROOT).with_suffix("")).replace("/", ".")


def walk(client, method, path, **kwargs):
    """(modules entered, switches, project functions called) for one request. A switch is a call
    from one module's function into another module's: the nearest project frame below the callee
    belongs to another module (or there is none: the request enters from Flask or a hook)."""
    modules, counts = set(), {"functions": 0, "switches": 0}

    def profile(frame, event, arg):
        if event != "call":
            return
        module = project_module(frame.f_code)
        if module is None:
            return
        counts["functions"] += 1
        modules.add(module)
        caller = frame.f_back
        while caller is not None and project_module(caller.f_code) is None:
            caller = caller.f_back
        if caller is None or project_module(caller.f_code) != module:
            counts["switches"] += 1

    sys.setprofile(profile)
    try:
        response = client.open(path, method=method, **kwargs)
    finally:
        sys.setprofile(None)
    assert response.status_code == 200, response.get_data(as_text=True)
    return sorted(modules), counts["switches"], counts["functions"]


def main():
    app, key = bench_app(100, BCRYPT_ROUNDS=4)
    client = app.test_client()
    headers = {"apikey": key}
    credentials = {"email": "walk@example.com", "password": "walk-password"}
    client.post("/auth/v1/signup", json=credentials, headers=headers)
    requests = {
        "key read": ("GET", "/rest/v1/items?id=eq.7", {"headers": headers}),
        "sign-in": (
            "POST",
            "/auth/v1/token?grant_type=password",
            {"headers": headers, "json": credentials},
        ),
    }
    for name, (method, path, kwargs) in requests.items():
        walk(client, method, path, **kwargs)  # warm: plans cached, tables reflected
        modules, switches, functions = walk(client, method, path, **kwargs)
        print(f"{name}: {len(modules)} modules, {switches} switches, {functions} functions")
        print("   ", " ".join(modules))


if __name__ == "__main__":
    main()
