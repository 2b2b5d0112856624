"""supabase-js's functions.invoke under node against minibase: JSON, text, form, blob and streamed
bodies; FunctionsHttpError for a function's own non-2xx, FunctionsRelayError for a bad token."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import serve_app

JS = Path(__file__).resolve().parent.parent / "js"
FUNCTIONS = Path(__file__).resolve().parent / "functions"
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["sqlite"])]  # node


def test_supabase_js_invokes_with_every_kind_of_body(node_modules, make_app, anon_key):
    app = make_app(FUNCTIONS_DIR=str(FUNCTIONS))
    base, stop = serve_app(app)
    try:
        env = {**os.environ, "MINIBASE_URL": base, "ANON_KEY": anon_key}
        done = subprocess.run(["node", "functions.mjs"], cwd=JS, env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    finally:
        stop()
        app.extensions["minibase"].function_runner.close()
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["hello"] == "Hello World"
    assert out["json"] == {"a": [1, "ü"]} and out["text"] == "plain text"
    assert out["form"] == [["a", "1"], ["b", "two"]] and out["blob"] == "hi"
    assert out["stream"] == "data: 0\n\ndata: 1\n\ndata: 2\n\n" and out["streamType"] == "text/event-stream"
    assert out["raises"] == [True, 500, "EDGE_FUNCTION_ERROR"]
    assert out["missing"] == [True, 404] and out["relay"] is True
