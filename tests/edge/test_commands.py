"""`flask --app app functions new NAME` writes a function that works as written, refuses a name that
cannot be one or is taken; `functions call NAME` runs it as the service and prints what it said;
FUNCTIONS=off removes /functions/v1."""

import pytest
import requests

from support import serve_app

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


def test_new_writes_a_function_that_answers_and_call_runs_it(make_app, tmp_path, anon_key):
    directory = tmp_path / "functions"
    app = make_app(FUNCTIONS_DIR=str(directory))
    try:
        check_new_and_call(app, directory, tmp_path, anon_key)
    finally:
        app.extensions["minibase"].function_runner.close()


def check_new_and_call(app, directory, tmp_path, anon_key):
    runner = app.test_cli_runner()
    made = runner.invoke(args=["functions", "new", "greet"])
    assert made.exit_code == 0 and (directory / "greet.py").exists(), made.output
    for refused in ("greet", "../evil", "_shared", "bad name", "x" * 65):
        again = runner.invoke(args=["functions", "new", refused])
        assert again.exit_code != 0 and not (tmp_path / "evil.py").exists(), refused
    called = runner.invoke(args=["functions", "call", "greet", "--body", '{"name": "Ann"}'])
    assert called.exit_code == 0, called.output
    assert "status 200" in called.output and '{"message": "Hello Ann!"}' in called.output
    assert "| Ann greeted by service_role" in called.output
    base, stop = serve_app(app)
    try:
        headers = {"apikey": anon_key, "Authorization": f"Bearer {anon_key}"}
        answer = requests.get(f"{base}/functions/v1/greet?name=Bo", headers=headers, timeout=30)
        assert answer.json() == {"message": "Hello Bo!"}
    finally:
        stop()


def test_functions_off_removes_the_api(make_app, anon_key):
    app = make_app(FUNCTIONS=False)
    answer = app.test_client().post("/functions/v1/hello", headers={"apikey": anon_key})
    assert answer.status_code == 404 and "does not provide Supabase Edge Functions" in answer.json["message"]
    assert app.extensions["minibase"].function_runner is None
