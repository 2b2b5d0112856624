"""/metrics and the JSON log of a real `python wsgi.py` with WORKERS=2: the counts of every worker,
each request once, and a log of JSON objects that holds none of the secrets the run used."""

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from auth import tokens
from support import SECRET, eventually, free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def request_ids(log):
    """The ids of the requests logged so far, from whole lines (a worker may be writing one)."""
    lines = log.read_text().splitlines(keepends=True)
    return {
        json.loads(line).get("request_id")
        for line in lines
        if line.endswith("\n") and "minibase.requests" in line
    }


def children(pid):
    return {int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def counted(base, key):
    response = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert response.status_code == 200, response.text
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "minibase_http_requests_total":
                found[(sample.labels["api"], sample.labels["status"])] = sample.value
    return found


@pytest.mark.parametrize("realtime", ["off", "on"])
def test_two_workers_count_every_request_once_and_log_json_without_secrets(database_url, tmp_path, realtime):
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "JWT_SECRET": SECRET,
        "PORT": str(port),
        "WORKERS": "2",
        "THREADS": "4",
        "REALTIME": realtime,
        "METRICS": "on",
        "LOG_FORMAT": "json",
        "RATE_LIMITS": "off",
        "STORAGE_ROOT": str(tmp_path / "storage"),
        "BCRYPT_ROUNDS": "4",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "stderr.log"
    anon, service = tokens.api_key("anon", SECRET), tokens.api_key("service_role", SECRET)
    password = "served-" + uuid.uuid4().hex
    base = f"http://127.0.0.1:{port}"
    with log.open("w") as stderr:
        server = subprocess.Popen(
            [sys.executable, "wsgi.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        up = eventually(lambda: server.poll() is not None or requests.get(f"{base}/live", timeout=(1, 10)),
                        60, 0.1, "wsgi.py serving", ignoring=(requests.ConnectionError,))  # fmt: skip
        assert up is not True, log.read_text()  # True: the server exited
        before = counted(base, service)
        key = {"apikey": anon}
        signup = requests.post(
            f"{base}/auth/v1/signup",
            json={"email": "w@example.com", "password": password},
            headers=key,
            timeout=10,
        )
        assert signup.status_code == 200
        session = signup.json()
        sent_rest = 40
        with requests.Session() as pooled, requests.Session() as other:  # two connections: both workers
            for n in range(sent_rest):
                client = pooled if n % 2 else other
                assert client.get(f"{base}/rest/v1/?apikey={anon}", timeout=10).status_code == 200
        for _ in range(7):
            bearer = {**key, "Authorization": "Bearer nope"}
            assert requests.get(f"{base}/auth/v1/user", headers=bearer, timeout=10).status_code in (401, 403)
        user = requests.get(
            f"{base}/auth/v1/user",
            headers={**key, "Authorization": f"Bearer {session['access_token']}"},
            timeout=10,
        )
        assert user.status_code == 200
        for refused in ({}, {"apikey": anon}, {"Authorization": f"Bearer {session['access_token']}"}):
            assert requests.get(f"{base}/metrics", headers=refused, timeout=10).status_code in (401, 403)
        after = counted(base, service)
        moved = {label: after.get(label, 0) - before.get(label, 0) for label in set(after) | set(before)}
        assert moved[("rest", "2xx")] == sent_rest
        assert moved[("auth", "2xx")] == 2  # the sign-up and the user read
        assert moved[("auth", "4xx")] == 7
        assert moved[("other", "4xx")] == 3  # the refused reads of /metrics
        assert moved[("other", "2xx")] == 1  # the first scrape; the second counts after it answers
        # A worker writes its lines a moment later (runtime/logs.py): they are in before one is killed
        eventually(lambda: len(request_ids(log)) > sent_rest, 30, what="a line per request")
        # A worker killed and replaced: what it counted stays counted, once.
        workers = children(server.pid)
        os.kill(min(workers), signal.SIGKILL)
        eventually(lambda: children(server.pid) - workers and len(children(server.pid)) >= 2, 30, 0.1,
                   "the dead worker replaced")  # fmt: skip
        again = counted(base, service)
        for label in (("rest", "2xx"), ("auth", "2xx"), ("auth", "4xx"), ("other", "4xx")):
            assert again[label] == after[label], label
        server.terminate()
        assert server.wait(timeout=40) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
    lines = log.read_text().splitlines()
    assert len(lines) > sent_rest
    secrets = [password, session["access_token"], session["refresh_token"], anon, service, SECRET]
    for line in lines:
        assert isinstance(json.loads(line), dict), line
        assert not [secret for secret in secrets if secret in line], line
    assert len(request_ids(log)) > sent_rest  # a request id per request
