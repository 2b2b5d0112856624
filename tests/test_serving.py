"""The service as `python wsgi.py` runs it: a drain on SIGTERM and SIGINT, idle and half-sent
connections that cannot take it offline, the headers every response carries, a request log
without secrets, and WORKERS processes sharing one port."""

import contextlib
import http.client
import json
import logging
import multiprocessing
import os
import random
import re
import resource
import select
import shutil
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
from runtime import logs, server
from support import SECRET, eventually, free_port, require

# Timing-sensitive (a thousand slow clients, /health answered within seconds): make test-slow runs these by
# themselves, after the parallel run.
pytestmark = pytest.mark.alone

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
        # not listening yet, or too busy starting to answer: asked again while the process lives
        eventually(lambda: answers(process, f"{base}/health"), 30, 0.05, "wsgi.py started")
        process.log = log
        return process, base, tokens.api_key("anon", SECRET)

    yield run
    for process, log in started:
        process.kill()
        process.wait(timeout=10)
        log.close()


def answers(process, url):
    """Whether `url` answers; an AssertionError at once if `process` (the server) has exited."""
    assert process.poll() is None, "the server exited"
    try:
        return (requests.get(url, timeout=1),)  # in a tuple: a Response with an error status is falsy
    except requests.RequestException:
        return None


def server_log(process, until=None):
    """What the server has logged; with `until`, once that text is in it (the log is written in
    batches, a tenth of a second apart)."""

    def text():
        process.log.flush()
        process.log.seek(0)
        return process.log.read()

    if until is None:
        return text()
    return eventually(lambda: until in (found := text()) and found, 10, 0.05, f"{until!r} logged")


@pytest.mark.parametrize("realtime", ["off", "on"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_drains_the_requests_in_flight_and_exits_0(start, signum, realtime):
    """On both servers: waitress (REALTIME=off) and uvicorn (Realtime on)."""
    # bcrypt at cost 12 takes a good fraction of a second: the sign-ups are in flight for a while.
    process, base, anon = start(BCRYPT_ROUNDS=12, THREADS=4, REALTIME=realtime)
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
    text = eventually(lambda: (log := server_log(process)).count("GET /rest/v1/ 200") >= 30 and log, 10, 0.05)
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


# --- WORKERS: several processes on one port


def children(process):
    """The pids of the processes whose parent is `process`."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        if int(stat.rpartition(")")[2].split()[1]) == process.pid:  # the field after the state: ppid
            found.add(int(entry.name))
    return found


def workers_of(process, count=2):
    """The pids of the server's worker processes, once there are `count` of them."""
    # a list that holds the set, so that an empty set (count=0) counts as found
    return eventually(lambda: [found] if len(found := children(process)) == count else None, 10, 0.05)[0]


def owner(connection, pids):
    """Which of `pids` holds the server's end of `connection` (an http.client connection), found
    through the socket's inode in /proc/net/tcp; None until a worker has accepted it."""
    port = connection.sock.getsockname()[1]
    server_port = connection.sock.getpeername()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.rpartition(":")[2], 16) for address in fields[1:3])
        if (local, remote) == (server_port, port) and fields[9] != "0":
            inode = f"socket:[{fields[9]}]"
    for pid in pids:
        try:
            if any(os.readlink(fd) == inode for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
        except OSError:
            continue
    return None


def connect_until_each_holds(base, pids, each, send=None):
    """Open connections to the server until every worker in `pids` holds `each` of them (the
    kernel hands a connection to whichever worker accepts first); with `send`, each connection
    sends that request once its worker is known. {connection: pid}."""
    host, port = base.removeprefix("http://").split(":")
    held = {}
    for _ in range(200):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.connect()
        deadline = time.monotonic() + 5
        while (pid := owner(connection, pids)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if pid is None or sum(p == pid for p in held.values()) >= each:
            connection.close()
            continue
        held[connection] = pid
        if send is not None:
            send(connection)
        if all(sum(p == pid for p in held.values()) >= each for pid in pids):
            return held
    raise AssertionError(f"the workers did not all accept connections: {held}")


def test_two_workers_answer_on_one_port(start):
    process, base, anon = start(WORKERS=2, THREADS=2)
    pids = workers_of(process)
    assert len(pids) == 2 and process.pid not in pids
    served = {}
    for connection, pid in connect_until_each_holds(base, pids, each=3).items():
        connection.request("GET", "/rest/v1/", headers={"apikey": anon})
        response = connection.getresponse()
        assert response.status == 200 and response.read()
        served[pid] = served.get(pid, 0) + 1
        assert owner(connection, pids) == pid  # the same worker answered on its connection
        connection.close()
    assert served == {pid: 3 for pid in pids}
    # one log: the parent's stderr holds every worker's lines, one whole line each

    def six_reads():
        lines = server_log(process).splitlines()
        return sum("GET /rest/v1/ 200" in line for line in lines) >= 6 and lines

    lines = eventually(six_reads)
    assert sum(line.endswith("GET /rest/v1/ 200 " + line.rpartition(" ")[2]) for line in lines) == 6


def test_a_killed_worker_is_replaced_and_the_service_keeps_answering(start):
    process, base, anon = start(WORKERS=2, THREADS=2)
    pids = workers_of(process)
    killed = min(pids)
    os.kill(killed, signal.SIGKILL)
    answers = [requests.get(f"{base}/health", timeout=10).status_code for _ in range(20)]
    assert answers == [200] * 20  # the other worker answered while the first was replaced
    now = eventually(lambda: killed not in (found := children(process)) and len(found) >= 2 and found)
    assert len(now) == 2 and len(now & pids) == 1
    (replacement,) = now - pids
    for connection in connect_until_each_holds(base, now, each=1):
        connection.request("GET", "/health")
        assert connection.getresponse().status == 200
        connection.close()
    assert f"worker {killed} exited unexpectedly (signal SIGKILL)" in server_log(process)
    assert f"worker {replacement} started" in server_log(process)


def test_sigterm_drains_every_worker_and_exits_0(start):
    # bcrypt at cost 12: each sign-up is in flight for a good fraction of a second
    process, base, anon = start(WORKERS=2, THREADS=2, BCRYPT_ROUNDS=12)
    pids = workers_of(process)
    sent = []

    def sign_up(connection):
        body = json.dumps({"email": f"w{len(sent)}@example.com", "password": "secret-pw"})
        connection.request(
            "POST", "/auth/v1/signup", body, {"apikey": anon, "Content-Type": "application/json"}
        )
        sent.append(connection)

    held = connect_until_each_holds(base, pids, each=3, send=sign_up)
    time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    statuses = [connection.getresponse().status for connection in sent]
    for connection in sent:
        connection.close()
    assert statuses == [200] * 6 and sorted(held.values()) == sorted(list(pids) * 3)
    assert process.wait(timeout=40) == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base}/health", timeout=2)
    log = server_log(process)
    assert log.count("POST /auth/v1/signup 200") == 6
    assert log.count("finishing the requests in flight") == 2
    assert log.rstrip().endswith("INFO minibase: stopped") and not workers_of(process, count=0)


def test_workers_write_the_log_in_whole_lines_that_a_pipe_keeps_together():
    """Every worker writes to the one stderr: a write of at most PIPE_BUF bytes to a pipe is never
    interleaved with another process's, so the writer writes whole lines in pieces that fit."""
    writes = []

    class Stream:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    writer = logs.Writer(stream=Stream(), interval=3600)
    record = logging.LogRecord("minibase.requests", logging.INFO, __file__, 0, "GET /é%s 200", None, None)
    for n in range(500):
        writer.records.put_nowait(logging.makeLogRecord({**record.__dict__, "args": (n,)}))
    writer.write_pending()
    assert len(writes) > 1 and all(len(w.encode()) <= select.PIPE_BUF for w in writes)
    assert all(w.endswith("\n") for w in writes)
    lines = "".join(writes).splitlines()
    assert [line.rpartition("/é")[2] for line in lines] == [f"{n} 200" for n in range(500)]


def both_serving(host, port, pids):
    """Whether two connections in turn go to both workers: a worker still starting (a loaded
    machine) publishes no count yet, and the one that serves rightly takes them all."""
    pair = [http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(2)]
    try:
        for connection in pair:
            connection.request("GET", "/health")
            connection.getresponse().read()
        return {owner(connection, pids) for connection in pair} == set(pids)
    finally:
        for connection in pair:
            connection.close()


@pytest.mark.parametrize("realtime", ["off", "on"])
def test_kept_open_connections_are_spread_over_the_workers(start, realtime):
    """Left to the kernel, the worker that wakes first took all sixteen of a load test's
    connections and the other one idled; each worker now accepts only while it holds fewest, under
    waitress (Realtime off) and uvicorn alike."""
    process, base, anon = start(WORKERS=2, THREADS=2, REALTIME=realtime)
    pids = workers_of(process)
    host, port = base.removeprefix("http://").split(":")

    eventually(lambda: both_serving(host, port, pids), 30, 0.2, "both workers serving")
    connections = [http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(12)]
    for pid in pids:  # the connections wait for the workers all at once, as a load test's do
        os.kill(pid, signal.SIGSTOP)
    try:
        for connection in connections:
            connection.connect()  # the kernel completes the handshake; the workers accept later
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    held = []
    for connection in connections:
        connection.request("GET", "/health")  # kept open afterwards, as a keep-alive client does
        assert connection.getresponse().read()
        held.append(owner(connection, pids))
    for connection in connections:
        connection.close()
    assert min(held.count(pid) for pid in pids) >= 4, held  # 2 of 12 without the balance


def wakeups(pid):
    """How many times the main thread of `pid` has gone to sleep and been woken."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))


def connections_held(pid, port):
    """How many connections to `port` the process `pid` holds open (those a client has closed
    count until the server closes them too, as the server counts them)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            sockets.add(os.readlink(fd))
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rpartition(":")[2], 16)
        if local_port == port and fields[3] != "0A" and f"socket:[{fields[9]}]" in sockets:  # 0A: listening
            held += 1
    return held


def connect(host, port, pids, connections):
    """A kept-open connection (added to `connections`) with a request answered on it; the worker
    in `pids` that holds it."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connections.append(connection)
    connection.request("GET", "/health")
    assert connection.getresponse().status == 200
    return owner(connection, pids)


def hold_back_one(host, port, pids, connections):
    """Kept-open connections (in `connections`) after which the first of the two `pids` holds two
    more than the second, more than its share, for as long as no other comes: (ahead, behind)."""
    eventually(lambda: both_serving(host, port, pids), 30, 0.2, "both workers serving")
    ours = {pid: [] for pid in pids}
    while min(len(kept) for kept in ours.values()) < 2:
        ours[connect(host, port, pids, connections)].append(connections[-1])
    ahead, behind = pids
    held = {pid: connections_held(pid, port) for pid in pids}
    excess = held[ahead] - held[behind] - 1
    for _ in range(abs(excess)):  # ours, and whatever else a worker holds, one apart
        ours[ahead if excess > 0 else behind].pop().close()
    eventually(
        lambda: connections_held(ahead, port) == connections_held(behind, port) + 1, 10, 0.1, "one apart"
    )
    time.sleep(0.5)  # each has published what it holds (every 0.1 s)
    os.kill(behind, signal.SIGSTOP)
    try:
        assert connect(host, port, pids, connections) == ahead  # n + 2 and n: only ahead could take it
    finally:
        os.kill(behind, signal.SIGCONT)
    return ahead, behind


def test_a_worker_holding_more_than_its_share_sleeps_until_a_connection_comes(start):
    """Under uvicorn a worker that found itself holding more than its share looked again every
    5 ms, a connection waiting or not: 200 wake-ups a second for as long as its clients stayed, and
    a burst of new connections waited in the kernel's queue while the workers took turns sleeping.
    It now waits for a connection to come, and only then looks, often, until a worker holding fewer
    has taken it, or (stopped, say) has published nothing for 2 s."""
    process, base, anon = start(WORKERS=2, THREADS=2, REALTIME="on")
    pids = workers_of(process)
    host, port = base.removeprefix("http://").split(":")
    port, connections = int(port), []
    try:
        ahead, behind = hold_back_one(host, port, pids, connections)
        before = {pid: wakeups(pid) for pid in pids}
        time.sleep(2)
        woken = {pid: (wakeups(pid) - before[pid]) / 2 for pid in pids}
        # about 10 a second each (uvicorn's own tick); 200 a second in the one ahead before
        assert woken[ahead] < 40 and woken[behind] < 40, woken
        os.kill(behind, signal.SIGSTOP)
        try:  # the one ahead, held back, keeps looking while a connection waits
            assert connect(host, port, pids, connections) == ahead
        finally:
            os.kill(behind, signal.SIGCONT)
        time.sleep(0.5)  # the one behind publishes again
        assert connect(host, port, pids, connections) == behind  # n + 3 and n: the one behind's
    finally:
        for connection in connections:
            connection.close()


@pytest.mark.parametrize("realtime", ["off", "on"])
def test_a_worker_out_of_open_files_leaves_new_connections_to_the_others(start, realtime):
    """A worker whose accept(2) fails for want of open files pauses a second and tries again, as
    before. It now publishes no count until it accepts again: it published its few connections
    every 0.1 s and took none, and the others held back for it, so that every new connection waited
    for as long as it lacked files. Under waitress (Realtime off) the same: it logged a traceback
    for each failed accept and tried again at once."""
    process, base, anon = start(WORKERS=2, THREADS=2, REALTIME=realtime)
    pids = workers_of(process)
    host, port = base.removeprefix("http://").split(":")
    port, connections = int(port), []
    try:
        ahead, behind = hold_back_one(host, port, pids, connections)
        soft, hard = resource.prlimit(behind, resource.RLIMIT_NOFILE)
        used = {int(fd.name) for fd in Path(f"/proc/{behind}/fd").iterdir()}
        lowest_free = min(set(range(len(used) + 1)) - used)
        resource.prlimit(behind, resource.RLIMIT_NOFILE, (lowest_free, hard))  # its next accept fails
        try:
            assert connect(host, port, pids, connections) == ahead  # after 2 s; never, before
        finally:
            resource.prlimit(behind, resource.RLIMIT_NOFILE, (soft, hard))
        assert server_log(process, until="accepting a connection failed ([Errno 24]")
        # with files again it takes connections again (and publishes what it holds once it has)
        eventually(lambda: connect(host, port, pids, connections) == behind, 10, 0.1, "one taken")
    finally:
        for connection in connections:
            connection.close()


def failed_sign_ins_from(base, anon, forwarded_for, count):
    """`count` wrong-password sign-ins for one address, as a proxy forwarding `forwarded_for` sends
    them; the last status."""
    for _ in range(count):
        status = requests.post(
            f"{base}/auth/v1/token?grant_type=password",
            json={"email": "proxied@example.com", "password": "wrong-pw"},
            headers={"apikey": anon, "X-Forwarded-For": forwarded_for},
            timeout=10,
        ).status_code
    return status


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limits(start):
    """waitress itself drops X-Forwarded-For unless told to trust the proxy: the app once never saw
    it, and every client behind nginx shared one failed-sign-in count."""
    process, base, anon = start(RATE_LIMITS="on", TRUSTED_PROXIES=1)
    assert failed_sign_ins_from(base, anon, "198.51.100.7", 10) == 400
    assert failed_sign_ins_from(base, anon, "198.51.100.7", 1) == 429  # that client is locked out
    # another client behind the same proxy is not; nor the one the proxy appended last to a forged list
    assert failed_sign_ins_from(base, anon, "198.51.100.8", 1) == 400
    assert failed_sign_ins_from(base, anon, "198.51.100.7, 198.51.100.9", 1) == 400
    # what a client puts before the proxy's entry is its own: garbage there gets the API's answer, in
    # JSON, not a plain-text 400 from the server
    garbled = requests.post(
        f"{base}/auth/v1/token?grant_type=password",
        json={"email": "proxied@example.com", "password": "wrong-pw"},
        headers={"apikey": anon, "X-Forwarded-For": '"unbalanced, 198.51.100.10', "X-Forwarded-Proto": "ftp"},
        timeout=10,
    )
    assert garbled.status_code == 400 and garbled.json()["error_code"] == "invalid_credentials"


def test_without_trusted_proxies_a_forged_forwarded_for_does_not_change_the_bucket(start):
    process, base, anon = start(RATE_LIMITS="on")
    for n in range(10):
        assert failed_sign_ins_from(base, anon, f"203.0.113.{n}", 1) == 400
    assert failed_sign_ins_from(base, anon, "203.0.113.200", 1) == 429


SLOW_CLIENTS = 1100  # past the server's CONNECTION_LIMIT (1000), where waitress stopped accepting
TRICKLE_SECONDS = 2.0  # each slow client sends one byte of its headers this often
ATTACK_SECONDS = 14  # past HEADER_SECONDS + CLEANUP_INTERVAL: the first clients must be gone by then
ANSWER_SECONDS = 3.0  # what /health may take under the attack (measured: 1.8 s at most, on busy cores)


class Slowloris:
    """SLOW_CLIENTS connections to 127.0.0.1:`port`, each sending one byte of an endless header every
    TRICKLE_SECONDS and opening again when the server closes it (slowloris), from a process of its
    own (in this one it would starve the test's own requests of the interpreter). On leaving:
    `held`, how long the server kept each connection it closed, and `oldest`, how long the oldest
    still open had been."""

    HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 100_000

    def __init__(self, port, count=SLOW_CLIENTS):
        self.port, self.count = port, count
        self.results, self.sender = multiprocessing.get_context("fork").Pipe(duplex=False)
        self.stopping = multiprocessing.get_context("fork").Event()
        self.process = multiprocessing.get_context("fork").Process(target=self.run, daemon=True)

    def __enter__(self):
        self.process.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        assert self.results.poll(20), "the attack did not report"
        self.held, self.oldest = self.results.recv()
        self.process.join(timeout=10)

    def run(self):
        poller, open_, held = select.poll(), {}, []  # fd -> [socket, bytes sent, next send, opened]

        def connect():
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", self.port))
            now = time.monotonic()
            open_[sock.fileno()] = [sock, 0, now + random.uniform(0, TRICKLE_SECONDS), now]
            poller.register(sock, select.POLLIN)

        for _ in range(self.count):
            connect()
        while not self.stopping.is_set():
            for fd, _ in poller.poll(50):  # the server closed it (or refused it): open another
                sock, _, _, opened = open_.pop(fd)
                poller.unregister(fd)
                sock.close()
                held.append(time.monotonic() - opened)
                connect()
            now = time.monotonic()
            for entry in list(open_.values()):
                sock, sent, due, _ = entry
                if due <= now:
                    entry[2] = now + TRICKLE_SECONDS
                    try:
                        entry[1] += sock.send(self.HEAD[sent : sent + 1])
                    except OSError:
                        pass  # not connected yet, or closed: poll says which
        now = time.monotonic()
        self.sender.send((held, max((now - opened for *_, opened in open_.values()), default=0)))
        for sock, *_ in open_.values():
            sock.close()


def enough_open_files(needed=SLOW_CLIENTS + 500):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open-files limit ({hard}) is below {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def answers_under_attack(base, seconds):
    """GET /health every half second for `seconds`: (status, seconds) of each."""
    answers = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            status = requests.get(f"{base}/health", timeout=10).status_code
        except requests.RequestException as exc:
            status = type(exc).__name__
        answers.append((status, round(time.monotonic() - started, 2)))
        time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    return answers


@pytest.mark.parametrize("realtime", ["off", "on"])
def test_slow_clients_past_the_connection_limit_leave_health_answered(start, realtime):
    """1,100 slowloris clients against `python wsgi.py`. waitress (REALTIME=off) stopped accepting at
    its 1,000 connections, and each client's trickle kept its own connection from timing out:
    /health went unanswered for as long as the attack lasted; now the longest-waiting are closed to
    make room. uvicorn (Realtime on) has no connection limit but had no header timeout either: each
    slow client was held for ever. On both, none is held past HEADER_SECONDS now."""
    enough_open_files()
    process, base, _ = start(REALTIME=realtime)
    port = int(base.rsplit(":", 1)[1])
    with Slowloris(port) as attack:
        answers = answers_under_attack(base, ATTACK_SECONDS)
    oldest = attack.oldest
    assert all(status == 200 and took < ANSWER_SECONDS for status, took in answers), answers
    if realtime == "off":  # the attack did fill waitress: it closed connections to make room
        assert len(attack.held) >= SLOW_CLIENTS - server.CONNECTION_LIMIT, len(attack.held)
    bound = server.HEADER_SECONDS + server.CLEANUP_INTERVAL + 1
    assert max(attack.held, default=0) < bound and oldest < bound, (max(attack.held, default=0), oldest)


def nginx_settings():
    """deploy/nginx.conf's site, and the worker settings its header says nginx.conf needs."""
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    connections = int(re.search(r"worker_connections (\d+);", site).group(1))
    files = int(re.search(r"worker_rlimit_nofile (\d+);", site).group(1))
    return site, connections, files


@pytest.fixture
def nginx(tmp_path):
    """Start nginx with deploy/nginx.conf's site, on plain HTTP on 127.0.0.1, in front of the
    minibase at `upstream_port`: its port."""
    binary = require(shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin"), "nginx", "nginx")
    started = []

    def run(upstream_port):
        site, connections, files = nginx_settings()
        port = free_port()
        site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
        site = re.sub(r"listen 443 ssl http2;", f"listen 127.0.0.1:{port};", site)
        site = re.sub(r"\n\s*ssl_certificate\S* [^;]*;", "", site)
        (tmp_path / "site.conf").write_text(site)
        kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        temp = "\n".join(f"{kind}_temp_path {tmp_path}/{kind};" for kind in kinds)
        (tmp_path / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"worker_processes 2;\nworker_rlimit_nofile {files};\npid {tmp_path}/nginx.pid;\n"
            f"error_log {tmp_path}/error.log;\ndaemon off;\n"
            f"events {{ worker_connections {connections}; }}\n"
            f"http {{ access_log off;\n{temp}\ninclude {tmp_path}/site.conf; }}\n"
        )
        process = subprocess.Popen(
            [binary, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        started.append(process)

        def listening():
            assert process.poll() is None, process.stderr.read().decode()
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port

        return eventually(listening, 10, 0.05, "nginx listening", ignoring=OSError)

    yield run
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        process.stderr.close()


def test_behind_the_documented_nginx_slow_clients_leave_health_answered(start, nginx):
    """The production recipe (deploy/nginx.conf in front) against the same attack: nginx holds the
    slow clients, never passes a half-sent request on, and drops each at its client_header_timeout."""
    enough_open_files()
    process, base, _ = start(TRUSTED_PROXIES=1)
    proxy = nginx(int(base.rsplit(":", 1)[1]))
    with Slowloris(proxy) as attack:
        answers = answers_under_attack(f"http://127.0.0.1:{proxy}", ATTACK_SECONDS)
    oldest = attack.oldest
    assert all(status == 200 and took < ANSWER_SECONDS for status, took in answers), answers
    header_timeout = int(re.search(r"client_header_timeout (\d+)s;", nginx_settings()[0]).group(1))
    assert max(attack.held) < header_timeout + 1 and oldest < header_timeout + 1, (max(attack.held), oldest)
    assert len(attack.held) >= SLOW_CLIENTS  # every one of them was dropped once by then


SLOW_BODIES = 8  # POSTs whose body trickles in, against THREADS=4: twice as many as threads
BODY = json.dumps({"email": "slow@example.com", "password": "not-the-password"}).encode()
BODY_BYTE_SECONDS = 0.25  # a trickling client sends one byte of its body this often (BODY: ~15 s)
STALL_BYTES = 5  # a stalling client sends this much of its body, then nothing


class SlowBodies:
    """SLOW_BODIES sign-ins to 127.0.0.1:`port` whose headers come at once and whose bodies do not,
    from a process of its own: half trickle BODY a byte every BODY_BYTE_SECONDS to its end, half
    send STALL_BYTES of it and stop. On leaving: `answers`, the status each trickling client got,
    and `stalled`, how long after its last byte the server closed each stalled one (None: open)."""

    def __init__(self, port, anon):
        self.head = (
            b"POST /auth/v1/token?grant_type=password HTTP/1.1\r\nHost: x\r\napikey: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (anon.encode(), len(BODY))
        )
        self.port = port
        self.results, self.sender = multiprocessing.get_context("fork").Pipe(duplex=False)
        self.stopping = multiprocessing.get_context("fork").Event()
        self.process = multiprocessing.get_context("fork").Process(target=self.run, daemon=True)

    def __enter__(self):
        self.process.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        assert self.results.poll(20), "the clients did not report"
        self.answers, self.stalled = self.results.recv()
        self.process.join(timeout=10)

    def run(self):
        clients = []  # [socket, bytes of BODY to send, sent, last byte's time, closed after, answer]
        for n in range(SLOW_BODIES):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(self.head)
            sock.setblocking(False)
            clients.append([sock, len(BODY) if n % 2 else STALL_BYTES, 0, time.monotonic(), None, b""])
        while not self.stopping.wait(BODY_BYTE_SECONDS):
            now = time.monotonic()
            for client in clients:
                sock, length, sent, last, closed, _ = client
                if closed is not None:
                    continue
                try:
                    data = sock.recv(65536)
                    client[5] += data
                    if not data:
                        client[4] = now - last
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    client[4] = now - last
                    continue
                if sent < length:
                    try:
                        sock.send(BODY[sent : sent + 1])
                        client[2], client[3] = sent + 1, now
                    except OSError:
                        client[4] = now - last
        answers = [answer[9:12].decode() for sock, length, *_, answer in clients if length == len(BODY)]
        stalled = [closed for sock, length, _, _, closed, _ in clients if length == STALL_BYTES]
        self.sender.send((answers, stalled))
        for sock, *_ in clients:
            sock.close()


@pytest.mark.parametrize("realtime", ["off", "on"])
def test_slow_request_bodies_hold_no_thread(start, realtime):
    """Eight sign-ins whose JSON body trickles in a byte at a time, against four threads. Under uvicorn
    (Realtime on) the view ran as soon as the headers were in and its read of the body held a thread
    for as long as the body took: four such clients held every thread, and /health went unanswered.
    Now, as under waitress, the body is read whole before a thread runs the app, and a body that
    stops coming (nothing for CHANNEL_TIMEOUT) has its connection closed."""
    process, base, anon = start(REALTIME=realtime, THREADS=4)
    seconds = server.CHANNEL_TIMEOUT + server.CLEANUP_INTERVAL + 2
    with SlowBodies(int(base.rsplit(":", 1)[1]), anon) as clients:
        answers = answers_under_attack(base, seconds)
    assert all(status == 200 and took < ANSWER_SECONDS for status, took in answers), answers
    assert clients.answers == ["400"] * (
        SLOW_BODIES // 2
    )  # each body reached the app whole: a wrong password
    bound = server.CHANNEL_TIMEOUT + server.CLEANUP_INTERVAL + 1
    assert all(held is not None and server.CHANNEL_TIMEOUT - 1 < held < bound for held in clients.stalled), (
        clients.stalled
    )
