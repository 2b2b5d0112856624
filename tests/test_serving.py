"""The service as `python wsgi.py` runs it: a drain on SIGTERM and SIGINT, idle and half-sent
connections that cannot take it offline, the headers every response carries, and a request log
without secrets."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from auth import tokens
from support import SECRET, free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def start(tmp_path):
    """Start `python wsgi.py` on SQLite with `settings`; yields (process, base URL, anon key)."""
    started = []

    def run(**settings):
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{tmp_path}/serving.db",
            "JWT_SECRET": SECRET,
            "PORT": str(port),
            "RATE_LIMITS": "off",
            **{name: str(value) for name, value in settings.items()},
        }
        log = open(tmp_path / f"server-{port}.log", "w+")
        process = subprocess.Popen(
            [sys.executable, "wsgi.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log
        )
        started.append((process, log))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{base}/health", timeout=1)
                break
            except requests.ConnectionError:
                assert process.poll() is None and time.monotonic() < deadline, "wsgi.py did not start"
                time.sleep(0.05)
        process.log = log
        return process, base, tokens.api_key("anon", SECRET)

    yield run
    for process, log in started:
        process.kill()
        process.wait(timeout=10)
        log.close()


def server_log(process, until=None):
    """What the server has logged; with `until`, once that text is in it (the log is written in
    batches, a tenth of a second apart)."""
    deadline = time.monotonic() + 10
    while True:
        process.log.flush()
        process.log.seek(0)
        text = process.log.read()
        if until is None or until in text or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_drains_the_requests_in_flight_and_exits_0(start, signum):
    # bcrypt at cost 12 takes a good fraction of a second: the sign-ups are in flight for a while.
    process, base, anon = start(BCRYPT_ROUNDS=12, THREADS=4)
    results = {}

    def sign_up(n):
        try:
            response = requests.post(
                f"{base}/auth/v1/signup",
                json={"email": f"drain{n}@example.com", "password": "secret-pw"},
                headers={"apikey": anon},
                timeout=60,
            )
            results[n] = response.status_code
        except requests.RequestException as exc:
            results[n] = type(exc).__name__

    threads = [threading.Thread(target=sign_up, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    process.send_signal(signum)
    for thread in threads:
        thread.join(timeout=60)
    assert process.wait(timeout=40) == 0
    assert results == {n: 200 for n in range(8)}, results
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base}/health", timeout=2)
    log = server_log(process)
    assert "finishing the requests in flight" in log
    # log lines are written in batches by a thread of their own, which writes every one before the exit
    assert log.count("POST /auth/v1/signup 200") == 8 and log.rstrip().endswith("INFO minibase: stopped")


def test_idle_and_half_sent_connections_leave_room_to_answer(start):
    """A hundred and fifty clients that send half a header and stop: waitress's default limit of
    100 connections once took the service offline for everyone."""
    process, base, _ = start()
    host, port = base.removeprefix("http://").split(":")
    idle = []
    try:
        for _ in range(150):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            idle.append(sock)
        started = time.monotonic()
        response = requests.get(f"{base}/health", timeout=10)
        assert response.status_code == 200
        assert time.monotonic() - started < 5
    finally:
        for sock in idle:
            sock.close()


def test_one_log_line_per_request_without_keys_or_tokens(start):
    process, base, anon = start()
    session = requests.post(
        f"{base}/auth/v1/signup",
        json={"email": "log@example.com", "password": "secret-pw"},
        headers={"apikey": anon},
        timeout=10,
    ).json()
    requests.get(f"{base}/rest/v1/nothing?select=id&apikey={anon}", timeout=10)
    requests.get(f"{base}/rest/v1/nothing?select=name&%61pikey={anon}", timeout=10)  # "apikey", encoded
    requests.get(f"{base}/auth/v1/user?apikey={anon}&access_token={session['access_token']}", timeout=10)
    text = server_log(process, until="GET /auth/v1/user")
    assert "POST /auth/v1/signup 200" in text
    assert "GET /rest/v1/nothing?select=id&apikey=*** 404" in text
    assert "GET /rest/v1/nothing?select=name&apikey=*** 404" in text
    for secret in (anon, session["access_token"], session["refresh_token"], "secret-pw", "$2b$"):
        assert secret not in text


def test_responses_carry_nosniff_and_auth_responses_no_store(api):
    session = api.sign_up()
    signed_in = api.sign_in()
    assert signed_in.headers["Cache-Control"] == "no-store"
    assert signed_in.headers["X-Content-Type-Options"] == "nosniff"
    user = api.get("/auth/v1/user", token=session["access_token"])
    assert user.headers["Cache-Control"] == "no-store"
    for response in (api.get("/rest/v1/nothing"), api.get("/health"), api.get("/rest/v1/")):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert "no-store" not in response.headers.get("Cache-Control", "")


def test_empty_answers_have_no_content_type_and_nothing_redirects(api):
    session = api.sign_up()
    response = api.post("/auth/v1/logout", token=session["access_token"])
    assert response.status_code == 204 and "Content-Type" not in response.headers
    for path in ("/rest/v1", "/rest/v1/"):
        assert api.get(path, headers={"Host": "evil.example"}).status_code == 200
    response = api.get("//rest/v1//", headers={"Host": "evil.example"})
    assert response.status_code == 404 and "Location" not in response.headers


def test_a_queue_of_requests_does_not_flood_the_log(start):
    """With more clients than threads waitress warned about its queue for most requests; the log
    keeps one line per request."""
    process, base, anon = start(THREADS=1)
    threads = [
        threading.Thread(
            target=lambda: requests.get(f"{base}/rest/v1/", headers={"apikey": anon}, timeout=30)
        )
        for _ in range(30)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    text = server_log(process)
    deadline = time.monotonic() + 10
    while text.count("GET /rest/v1/ 200") < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
        text = server_log(process)
    assert "Task queue depth" not in text
    assert text.count("GET /rest/v1/ 200") == 30


def test_failed_sign_ins_are_counted_across_processes(start):
    """Two processes on one database, as CGI or Passenger run several: the failed-sign-in limit is
    kept in the database, so ten failures spread over both lock the account on both."""
    first, base_a, anon = start(RATE_LIMITS="on")
    _, base_b, _ = start(RATE_LIMITS="on")
    headers = {"apikey": anon}
    body = {"email": "cgi@example.com", "password": "secret-pw"}
    assert (
        requests.post(f"{base_a}/auth/v1/signup", json=body, headers=headers, timeout=10).status_code == 200
    )
    for n in range(10):
        base = base_a if n % 2 else base_b
        wrong = requests.post(
            f"{base}/auth/v1/token?grant_type=password",
            json={**body, "password": "wrong-pw"},
            headers=headers,
            timeout=10,
        )
        assert wrong.status_code == 400
    for base in (base_a, base_b):
        right = requests.post(
            f"{base}/auth/v1/token?grant_type=password", json=body, headers=headers, timeout=10
        )
        assert right.status_code == 429 and int(right.headers["Retry-After"]) > 0
