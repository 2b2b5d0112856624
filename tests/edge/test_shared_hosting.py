"""Functions where minibase cannot keep worker processes between requests: under CGI each request
is a new process, which starts the function's worker for that one call (a cold start every time)
and ends it when it exits; under Passenger the app's process keeps its workers as a server does.
Either way the limits and status codes hold."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from auth import tokens
from support import SECRET

ROOT = Path(__file__).resolve().parent.parent.parent
FUNCTIONS = Path(__file__).resolve().parent / "functions"
pytestmark = pytest.mark.slow  # a python process per request


def cgi_call(env, name):
    """POST /functions/v1/NAME through deploy/minibase.cgi: (head, body, seconds, the processes
    left in its process group after it ended)."""
    anon = tokens.api_key("anon", SECRET)
    cgi_env = {
        **env,
        "GATEWAY_INTERFACE": "CGI/1.1",
        "REQUEST_METHOD": "POST",
        "PATH_INFO": f"/functions/v1/{name}",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "203.0.113.7",
        "CONTENT_LENGTH": "0",
        "HTTP_APIKEY": anon,
        "HTTP_AUTHORIZATION": f"Bearer {anon}",
    }
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "deploy" / "minibase.cgi")], env=cgi_env,
                          capture_output=True, timeout=60)  # fmt: skip
    head, _, payload = done.stdout.partition(b"\r\n\r\n")
    return head.decode(), payload, time.monotonic() - started


def workers_running(mark):
    """The pids of worker processes whose environment holds `mark` (a worker inherits the
    environment of the process that started it): this test's, whatever else runs beside it."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(entry.name)
        except OSError:
            continue
    return found


def test_under_cgi_a_function_runs_in_the_request_and_leaves_no_process(tmp_path):
    greeting = uuid.uuid4().hex  # in the environment of this test's workers only (peek says it)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/cgi.db", "JWT_SECRET": SECRET,
           "FUNCTIONS_DIR": str(FUNCTIONS), "GREETING": greeting}  # fmt: skip
    head, body, _ = cgi_call(env, "peek")
    assert head.startswith("Status: 200") and json.loads(body)["greeting"] == greeting
    head, body, _ = cgi_call(env, "hello")
    assert head.startswith("Status: 200") and body == b"Hello World"
    head, body, seconds = cgi_call(env, "hangs")  # its config.toml: timeout = 1
    assert head.startswith("Status: 504") and json.loads(body)["code"] == "IDLE_TIMEOUT"
    head, body, _ = cgi_call(env, "raises")
    assert head.startswith("Status: 500") and b"boom" not in body
    time.sleep(0.5)
    assert workers_running(f"GREETING={greeting}".encode()) == []  # each CGI process took its worker


def test_under_passenger_the_app_s_process_keeps_its_workers(tmp_path):
    anon = tokens.api_key("anon", SECRET)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/passenger.db", "JWT_SECRET": SECRET,
           "FUNCTIONS_DIR": str(FUNCTIONS)}  # fmt: skip
    script = (
        "import json, runpy; from werkzeug.test import Client; "
        "app = runpy.run_path('deploy/passenger_wsgi.py')['application']; "
        f"h = {{'apikey': {anon!r}, 'Authorization': 'Bearer {anon}'}}; "
        "pids = [Client(app).post('/functions/v1/counter', headers=h).get_json()['pid'] for _ in range(2)]; "
        "print(json.dumps([pids, Client(app).post('/functions/v1/raises', headers=h).status_code]))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=60)
    (first, second), raised = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert first == second and raised == 500, done.stderr.decode()[-2000:]
