"""The deployment files work and agree with the service: the units give the drain its time, the
proxy waits longer than the database timeouts, the CGI script and Passenger's file serve requests."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import config
from auth import tokens
from runtime import server
from support import SECRET

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["minibase.service", "minibase@.service"])
def test_the_systemd_units_let_the_drain_finish(name):
    unit = (ROOT / "deploy" / name).read_text()
    assert "KillSignal=SIGTERM" in unit
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))
    assert stop > server.DRAIN_SECONDS
    nofile = int(re.search(r"^LimitNOFILE=(\d+)$", unit, re.M).group(1))
    assert nofile > server.CONNECTION_LIMIT
    assert re.search(r"^ExecStart=\S+/python wsgi.py$", unit, re.M) and (ROOT / "wsgi.py").exists()


def test_the_proxy_waits_longer_than_the_service_does():
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", site).group(1))
    defaults = config.from_environment({})
    assert read_timeout > 2 * defaults["DB_TIMEOUT"] + defaults["STATEMENT_TIMEOUT"]
    assert "X-Forwarded-For" in site and "client_max_body_size 1m" in site


def cgi_request(env, method, path, body=b"", headers=None):
    """One request through deploy/minibase.cgi, run as a web server runs a CGI script."""
    cgi_env = {
        **env,
        "GATEWAY_INTERFACE": "CGI/1.1",
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "203.0.113.7",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        **{"HTTP_" + name.upper().replace("-", "_"): value for name, value in (headers or {}).items()},
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "minibase.cgi")],
        input=body,
        env=cgi_env,
        capture_output=True,
        timeout=60,
    )
    head, _, payload = done.stdout.partition(b"\r\n\r\n")
    return head.decode(), json.loads(payload) if payload else None


@pytest.mark.slow  # starts python processes: seconds each, the slow tier's kind
def test_the_cgi_script_serves_a_sign_up_and_a_sign_in(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/cgi.db",
        "JWT_SECRET": SECRET,
        "BCRYPT_ROUNDS": "4",
    }
    anon = tokens.api_key("anon", SECRET)
    body = json.dumps({"email": "cgi@example.com", "password": "secret-pw"}).encode()
    head, session = cgi_request(env, "POST", "/auth/v1/signup", body, {"apikey": anon})
    assert head.startswith("Status: 200") and session["user"]["email"] == "cgi@example.com"
    head, signed_in = cgi_request(env, "POST", "/auth/v1/token", body, {"apikey": anon})
    assert head.startswith("Status: 400")  # no grant_type: the CGI path keeps the API's errors
    head, health = cgi_request(env, "GET", "/health")
    assert head.startswith("Status: 200") and health == {"status": "ok"}
    # A CGI script cannot hold a socket open: Realtime answers a JSON 501 that says so.
    head, realtime = cgi_request(env, "GET", "/realtime/v1/websocket?vsn=1.0.0", b"", {"apikey": anon})
    assert head.startswith("Status: 501") and "cannot hold a WebSocket" in realtime["message"]


def test_passenger_finds_application_in_passenger_wsgi_py(tmp_path):
    anon = tokens.api_key("anon", SECRET)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/passenger.db", "JWT_SECRET": SECRET}
    script = (
        "import runpy; from werkzeug.test import Client; "
        "app = runpy.run_path('deploy/passenger_wsgi.py')['application']; "
        "print(Client(app).get('/health').get_data(as_text=True)); "
        f"print(Client(app).get('/realtime/v1/websocket', headers={{'apikey': {anon!r}}}).status_code)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=60)
    health, realtime = done.stdout.decode().split()
    assert json.loads(health) == {"status": "ok"}, done.stderr.decode()[-2000:]
    assert realtime == "501"  # no socket under Passenger
