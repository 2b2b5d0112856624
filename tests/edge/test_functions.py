"""/functions/v1 over real HTTP, with real worker processes: the wire (methods, bodies of every kind,
query, sub-paths, the function's status, headers and body, streams), Supabase's status codes for
every failure made to happen for real, warm workers and their replacement, reload without restart,
secrets, the caller, and supabase-py's functions.invoke."""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import jwt
import pytest
import requests

from runner import service
from runner.journal import Journal
from runner.service import never_logged
from support import SECRET, eventually, serve_app, supabase_clients

FUNCTIONS = Path(__file__).resolve().parent / "functions"
pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


@pytest.fixture
def served(make_app):
    """(base URL, app) of a service whose FUNCTIONS_DIR is tests/edge/functions."""
    started = []

    def serve(threads=8, **settings):
        app = make_app(FUNCTIONS_DIR=str(settings.pop("directory", FUNCTIONS)), **settings)
        base, stop = serve_app(app, threads=threads)
        started.append((app, stop))
        return base, app

    yield serve
    for app, stop in started:
        stop()
        app.extensions["minibase"].function_runner.close()


@pytest.fixture
def base(served):
    return served()[0]


def keyed(key, token=None):
    return {"apikey": key, "Authorization": f"Bearer {token or key}"}


def call(base, name, key, method="POST", token=None, **kwargs):
    headers = {**keyed(key, token), **kwargs.pop("headers", {})}
    return requests.request(method, f"{base}/functions/v1/{name}", headers=headers, timeout=60, **kwargs)


def assert_failure(response, status, code):
    """Supabase's error: the status, JSON {code, message}, the sb-error-code header, and nothing of
    the function's own text, paths or secrets."""
    assert response.status_code == status, response.text
    assert response.headers["sb-error-code"] == code
    assert response.json()["code"] == code and set(response.json()) == {"code", "message"}
    for leaked in ("Traceback", str(FUNCTIONS), "boom", SECRET, ".py"):
        assert leaked not in response.text


def test_hello_answers_as_the_function_made_it(base, anon_key):
    response = call(base, "hello", anon_key)
    assert response.status_code == 200 and response.text == "Hello World"
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_every_method_reaches_the_function_with_query_and_sub_path(base, anon_key, method):
    response = call(base, "mirror/a/b%20c?x=1&x=2&y=", anon_key, method=method, data=b"body")
    assert response.status_code == 200
    mirrored = response.json()
    assert mirrored["method"] == method
    assert mirrored["url"].endswith("/functions/v1/mirror/a/b%20c?x=1&x=2&y=")
    assert mirrored["body"] == ("body" if method != "GET" else mirrored["body"])


def test_the_function_s_headers_go_back_but_the_connection_s_own(base, anon_key):
    response = call(base, "headers", anon_key)
    assert response.status_code == 200 and response.text == "four"
    assert response.headers["X-Own"] == "kept" and response.headers["Set-Cookie"] == "a=1"
    assert response.headers["Content-Length"] == "4" and "Upgrade" not in response.headers


def test_other_methods_are_405(base, anon_key):
    assert call(base, "hello", anon_key, method="TRACE").status_code == 405


@pytest.mark.parametrize(
    ("kind", "sent", "expected"),
    [
        ("json", {"json": {"a": [1, "ü"]}}, {"a": [1, "ü"]}),
        ("text", {"data": "plain ü".encode()}, "plain ü"),
        ("form", {"data": {"a": "1", "b": "two"}}, [["a", "1"], ["b", "two"]]),
        ("form", {"files": {"f": ("f.txt", b"file bytes", "text/plain")}, "data": {"a": "1"}},
         [["a", "1"], ["f", "file bytes"]]),
        ("blob", {"data": bytes(range(256))}, bytes(range(256)).decode("utf-8", "replace")),
    ],
)  # fmt: skip
def test_bodies_of_every_kind_reach_the_function_as_sent(base, anon_key, kind, sent, expected):
    response = call(base, "mirror", anon_key, headers={"response-type": kind}, **sent)
    assert response.status_code == 200, response.text
    assert response.json()["body"] == expected
    headers = dict(response.json()["headers"])
    assert headers["response-type"] == kind and headers["apikey"] == anon_key


def test_a_stream_reaches_the_client_piece_by_piece(base, anon_key):
    """Each event arrives as the function yields it (50 ms apart), not all at the end."""
    with call(base, "stream?n=6", anon_key, method="GET", stream=True) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        arrived = []
        for piece in response.iter_content(chunk_size=None):
            arrived.append((time.monotonic(), piece))
    assert b"".join(piece for _, piece in arrived) == b"".join(f"data: {n}\n\n".encode() for n in range(6))
    assert len(arrived) >= 3 and arrived[-1][0] - arrived[0][0] >= 0.15


def test_a_warm_worker_keeps_its_state_and_a_new_version_is_picked_up(served, anon_key, tmp_path):
    directory = tmp_path / "functions"
    shutil.copytree(FUNCTIONS, directory)
    base, _ = served(directory=directory)
    first, second = (call(base, "counter", anon_key).json() for _ in range(2))
    assert second == {"pid": first["pid"], "calls": 2}
    module = directory / "counter.py"
    module.write_text(module.read_text().replace('"calls": calls', '"calls": calls * 100'))
    os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))  # a second later, on any file system
    changed = call(base, "counter", anon_key).json()
    assert changed["calls"] == 100 and changed["pid"] != first["pid"]


def test_a_worker_is_replaced_after_max_calls_by_one_started_before_a_call_needs_it(served, anon_key):
    """Past FUNCTIONS_MAX_CALLS the worker's successor starts beside it, and the old one is let go
    once the new one is ready: the next call finds a worker waiting, and waits for no start."""
    base, app = served(FUNCTIONS_MAX_CALLS=2)
    pool = app.extensions["minibase"].function_runner.pool
    first, second = (call(base, "counter", anon_key).json() for _ in range(2))
    assert first["pid"] == second["pid"] and second["calls"] == 2
    deadline = time.monotonic() + 10
    while not (ready := [w for ws in pool.idle.values() for w in ws if w.process.pid != first["pid"]]):
        assert time.monotonic() < deadline, "no successor was started"
        time.sleep(0.05)
    old = [w for ws in pool.idle.values() for w in ws if w.process.pid == first["pid"]]
    assert not old and len(ready) == 1  # the old one let go as the new one was kept
    with pytest.raises(ProcessLookupError):
        os.kill(first["pid"], 0)  # and its process ended (reaped)
    third = call(base, "counter", anon_key).json()
    assert third == {"pid": ready[0].process.pid, "calls": 1}


@pytest.mark.parametrize("what", ["thread", "file"])
def test_a_worker_that_leaks_threads_or_files_is_replaced(base, anon_key, what):
    first = call(base, f"leaks?what={what}", anon_key).json()["pid"]
    second = call(base, f"leaks?what={what}", anon_key).json()["pid"]
    assert first != second


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("raises", 500, "EDGE_FUNCTION_ERROR"),
        ("exits", 500, "EDGE_FUNCTION_ERROR"),
        ("dies", 500, "EDGE_FUNCTION_ERROR"),
        ("hijack", 500, "EDGE_FUNCTION_ERROR"),
        ("hangs", 504, "IDLE_TIMEOUT"),
        ("spins", 546, "WORKER_LIMIT"),
        ("allocates", 546, "WORKER_LIMIT"),
        ("allocates?at_once=1", 546, "WORKER_LIMIT"),
        ("needs_package", 503, "BOOT_ERROR"),
        ("exits_at_import", 503, "BOOT_ERROR"),
        ("nothing_here", 404, "NOT_FOUND"),
    ],
)
def test_each_failure_is_supabase_s_status_and_harms_nothing_else(base, anon_key, service_key, caplog, name,
                                                                  status, code):  # fmt: skip
    caplog.set_level("INFO", logger="minibase.functions")
    assert_failure(call(base, name, anon_key), status, code)
    assert call(base, "hello", anon_key).text == "Hello World"
    assert requests.get(f"{base}/health", timeout=5).status_code == 200
    if name == "raises":  # the traceback, with what the client did not see, is in the log
        assert "RuntimeError: boom [redacted] at " in caplog.text and "Traceback" in caplog.text
        assert service_key not in caplog.text


def test_the_lines_never_keep_the_database_password_or_a_secret_key(backend):  # the module's, unused
    """The journal takes out of a function's lines what it may print of the project's secrets: the
    service_role key and JWT_SECRET as before, the database's password from SUPABASE_DB_URL (as sent
    and percent-decoded), and every secret API key; a password too short to find safely is left."""
    settings = {"JWT_SECRET": SECRET, "SECRET_KEYS": {"default": "sb_secret_" + "s" * 30}}
    own = {"SUPABASE_SERVICE_ROLE_KEY": "service-key-jwt",
           "SUPABASE_DB_URL": "mysql+pymysql://app:p%40ss-w0rd@db/app"}  # fmt: skip
    journal, R = Journal(never_logged(settings, own)), "[redacted]"
    printed = f"{own['SUPABASE_DB_URL']} p@ss-w0rd {'sb_secret_' + 's' * 30} service-key-jwt {SECRET} kept"
    assert journal.redact(printed) == f"mysql+pymysql://app:{R}@db/app {R} {R} {R} {R} kept"
    short = {**own, "SUPABASE_DB_URL": "mysql+pymysql://app:pw@db/app"}
    assert Journal(never_logged(settings, short)).redact("pw of app") == "pw of app"


def test_a_module_with_a_syntax_error_is_a_boot_error_until_it_is_fixed(served, anon_key, tmp_path):
    directory = tmp_path / "functions"
    directory.mkdir()
    module = directory / "fixme.py"
    module.write_text("def handler(request, caller)\n    return 'no'\n")
    base, _ = served(directory=directory)
    assert_failure(call(base, "fixme", anon_key), 503, "BOOT_ERROR")
    module.write_text("def handler(request, caller):\n    return 'fixed'\n")
    os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert call(base, "fixme", anon_key).text == "fixed"


def test_a_package_function_and_its_shared_helpers(served, anon_key, tmp_path):
    directory = tmp_path / "functions"
    (directory / "_shared").mkdir(parents=True)
    (directory / "_shared" / "greeting.py").write_text("WORD = 'hi'\n")
    (directory / "greet").mkdir()
    (directory / "greet" / "__init__.py").write_text(
        "from _shared.greeting import WORD\n\ndef handler(request, caller):\n    return WORD\n"
    )
    base, _ = served(directory=directory)
    assert call(base, "greet", anon_key).text == "hi"
    assert_failure(call(base, "_shared", anon_key), 404, "NOT_FOUND")


def test_too_many_calls_at_once_are_refused_not_queued(served, anon_key):
    """Two calls of one function at once with FUNCTIONS_CONCURRENCY=2 (one per function): the second
    is refused at once, 546 with Retry-After, while the first runs on."""
    base, app = served(FUNCTIONS_CONCURRENCY=2)
    first = threading.Thread(target=call, args=(base, "slow", anon_key))
    first.start()
    running = app.extensions["minibase"].function_runner.pool.running
    eventually(lambda: running["slow"] >= 1, 30, what="the first call running")
    started = time.monotonic()
    refused = call(base, "slow", anon_key)
    assert_failure(refused, 546, "WORKER_LIMIT")
    # refused, not queued behind the first call's three seconds
    assert refused.headers["Retry-After"] == "1" and time.monotonic() - started < 2.5
    assert call(base, "hello", anon_key).text == "Hello World"  # another function has its own room
    first.join()


def test_secrets_come_from_the_env_file_and_the_service_s_own_stay_out(
    served, anon_key, tmp_path, monkeypatch
):
    env_file = tmp_path / "functions.env"
    env_file.write_text("GREETING=hello from the file\n")
    monkeypatch.setenv("JWT_SECRET", "a-service-setting-functions-must-not-see-0123456789")
    base, _ = served(FUNCTIONS_ENV_FILE=str(env_file))
    call(base, "counter", anon_key)  # another function's worker
    seen = call(base, "peek", anon_key).json()
    assert seen == {"other_functions": ["minibase_function_peek"], "jwt_secret": None,
                    "greeting": "hello from the file"}  # fmt: skip
    assert call(base, "whoami", anon_key).json()["has_service_key"] is True


def test_the_function_knows_its_caller(base, anon_key, service_key, app_user_token):
    token, user_id = app_user_token(base)
    assert call(base, "whoami", anon_key).json()["role"] == "anon"
    assert call(base, "whoami", service_key).json()["role"] == "service_role"
    user = call(base, "whoami", anon_key, token=token).json()
    assert (user["role"], user["user_id"], user["sub"]) == ("authenticated", user_id, str(user_id))


@pytest.fixture
def app_user_token(anon_key):
    def sign_in(base, email="fn@example.com"):
        sent = {"email": email, "password": "secret-pw"}
        requests.post(f"{base}/auth/v1/signup", json=sent, headers={"apikey": anon_key}, timeout=10)
        answer = requests.post(f"{base}/auth/v1/token?grant_type=password", json=sent,
                               headers={"apikey": anon_key}, timeout=10).json()  # fmt: skip
        return answer["access_token"], answer["user"]["id"]

    return sign_in


def test_the_entry_point_runs_a_function_as_the_service(served):
    _, app = served()
    with app.app_context():
        status, body = service.invoke("whoami", {"event": "INSERT"})
        assert status == 200 and json.loads(body)["role"] == "service_role"
        status, body = service.invoke("mirror", {"event": "INSERT"}, headers={"response-type": "json"})
        assert json.loads(body)["body"] == {"event": "INSERT"}
        assert service.invoke("stream")[1].count(b"data:") == 5
        assert service.invoke("nothing_here")[0] == 404
        assert service.invoke("raises")[0] == 500


def test_calls_are_journaled_with_their_own_lines(served, anon_key):
    base, app = served()
    call(base, "counter", anon_key)
    call(base, "raises", anon_key)
    recent = app.extensions["minibase"].function_runner.journal.recent()
    assert [(c["function"], c["status"], c["error_code"]) for c in recent[:2]] == [
        ("raises", 500, "EDGE_FUNCTION_ERROR"),
        ("counter", 200, None),
    ]
    assert recent[1]["lines"][0].startswith("call 1 in ")
    assert any("RuntimeError: boom" in line for line in recent[0]["lines"])


# --- who may call


def other_secret_token(role="anon"):
    return jwt.encode({"role": role, "iss": "minibase"}, "another-secret-of-at-least-32-characters!", "HS256")


def test_with_verify_jwt_on_a_call_without_a_valid_key_or_token_never_reaches_the_function(base, anon_key):
    nothing = requests.post(f"{base}/functions/v1/hello", timeout=10)
    assert nothing.status_code == 401 and nothing.headers["sb-error-code"] == "UNAUTHORIZED_NO_AUTH_HEADER"
    forged = requests.post(f"{base}/functions/v1/hello", headers={"apikey": other_secret_token()}, timeout=10)
    assert forged.status_code == 401 and forged.json()["message"] == "Invalid API key"
    forged = {"Authorization": f"Bearer {other_secret_token()}"}
    forged_bearer = requests.post(f"{base}/functions/v1/hello", headers=forged, timeout=10)
    assert forged_bearer.status_code == 401 and forged_bearer.json()["message"] == "Invalid JWT"
    # a valid bearer without an apikey is a call, as at Supabase (functions-js sends no apikey)
    bearer_only = requests.post(f"{base}/functions/v1/hello", headers={"Authorization": f"Bearer {anon_key}"},
                                timeout=10)  # fmt: skip
    assert bearer_only.text == "Hello World"


def test_a_secret_key_from_a_browser_is_refused(served):
    base, _ = served(SECRET_KEYS={"default": "sb_secret_" + "s" * 30})
    secret = "sb_secret_" + "s" * 30
    browser = {"User-Agent": "Mozilla/5.0", "apikey": secret, "Authorization": f"Bearer {secret}"}
    assert requests.post(f"{base}/functions/v1/whoami", headers=browser, timeout=10).status_code == 401
    server = {"apikey": secret, "Authorization": f"Bearer {secret}"}
    assert (
        requests.post(f"{base}/functions/v1/whoami", headers=server, timeout=10).json()["role"]
        == "service_role"
    )


def test_verify_jwt_wants_a_valid_bearer_before_the_function_runs(base, anon_key, caplog):
    caplog.set_level("INFO", logger="minibase.functions")
    expired = jwt.encode({"role": "anon", "exp": int(time.time()) - 10}, SECRET, "HS256")
    ended_session = jwt.encode({"sub": "1", "role": "authenticated", "session_id": "gone",
                                "exp": int(time.time()) + 600}, SECRET, "HS256")  # fmt: skip
    no_bearer = requests.post(f"{base}/functions/v1/hello", headers={"apikey": anon_key}, timeout=10)
    assert no_bearer.status_code == 401 and no_bearer.headers["x-relay-error"] == "true"
    assert no_bearer.headers["sb-error-code"] == "UNAUTHORIZED_NO_AUTH_HEADER"
    for token in (other_secret_token(), expired, ended_session, "not-a-jwt", "a.b.c"):
        refused = call(base, "hello", anon_key, token=token)
        assert refused.status_code == 401 and refused.headers["x-relay-error"] == "true", token
        assert refused.json()["message"] == "Invalid JWT"
    assert "function hello" not in caplog.text  # refused before the function ran
    # a token signed with the project's secret that names no session is accepted, as the relay does
    custom = jwt.encode({"name": "check"}, SECRET, "HS256")
    assert call(base, "hello", anon_key, token=custom).text == "Hello World"


def test_a_refresh_token_or_a_signed_url_is_no_callers_token(base, anon_key, service_key):
    """Tokens minibase signs with JWT_SECRET for other uses are refused as callers' tokens: a refresh
    token (which names its user for 30 days, signed out or banned), and a storage signed URL's."""
    sent = {"email": "refresh@example.com", "password": "secret-pw"}
    requests.post(f"{base}/auth/v1/signup", json=sent, headers={"apikey": anon_key}, timeout=10)
    session = requests.post(f"{base}/auth/v1/token?grant_type=password", json=sent,
                            headers={"apikey": anon_key}, timeout=10).json()  # fmt: skip
    bucket = requests.post(f"{base}/storage/v1/bucket", json={"name": "fn-docs"},
                           headers=keyed(service_key), timeout=10)  # fmt: skip
    assert bucket.status_code == 200, bucket.text
    requests.post(f"{base}/storage/v1/object/fn-docs/a.txt", data=b"a", timeout=10,
                  headers={**keyed(service_key), "Content-Type": "text/plain"})  # fmt: skip
    signed = requests.post(f"{base}/storage/v1/object/sign/fn-docs/a.txt", json={"expiresIn": 60},
                           headers=keyed(service_key), timeout=10).json()["signedURL"]  # fmt: skip
    url_token = signed.split("token=")[1]
    assert call(base, "whoami", anon_key, token=session["access_token"]).json()["role"] == "authenticated"
    for token in (session["refresh_token"], url_token):
        assert len(token) > 40  # JWTs both
        refused = call(base, "whoami", anon_key, token=token)
        assert refused.status_code == 401 and refused.json()["message"] == "Invalid JWT", token
    requests.post(f"{base}/auth/v1/logout", headers=keyed(anon_key, session["access_token"]), timeout=10)
    refused = call(base, "whoami", anon_key, token=session["refresh_token"])
    assert refused.status_code == 401


def test_with_verify_jwt_off_anyone_may_call(base, anon_key, service_key):
    """A Stripe webhook: no key, no token; a bad token is no reason to refuse, and gives no role."""
    plain = requests.post(f"{base}/functions/v1/open", data="x", timeout=10)
    assert plain.status_code == 200 and plain.json() == {"role": "anon", "body": "x"}
    keyed_call = requests.post(f"{base}/functions/v1/open", headers={"apikey": service_key}, timeout=10)
    assert keyed_call.json()["role"] == "service_role"
    bad = call(base, "open", anon_key, token=other_secret_token("service_role"))
    assert bad.status_code == 200 and bad.json()["role"] == "anon"


@pytest.mark.parametrize(
    "name",
    ["..", "%2e%2e", "%2E%2E/hello", "..%2fhello", "hello%00", "hello%00.py", "h%C3%A9llo", "hello.py",
     "HELLO", "%EF%BD%88ello", "_shared", "-hello", "config", "config.toml", ".", "%2e", "x" * 300,
     "..%2f..%2fapp", "%2fetc%2fpasswd", ".env", "%2eenv", "config.toml%00"],
)  # fmt: skip
def test_hostile_names_are_404_and_import_nothing(base, anon_key, name, caplog):
    caplog.set_level("INFO", logger="minibase.functions")
    response = requests.post(f"{base}/functions/v1/{name}", headers=keyed(anon_key), timeout=10)
    assert response.status_code == 404
    assert "Traceback" not in response.text and str(FUNCTIONS) not in response.text
    assert "BOOT_ERROR" not in caplog.text


def test_a_body_past_the_limit_is_413(served, anon_key):
    big, _ = served(FUNCTIONS_MAX_BODY=2_000_000)
    assert len(call(big, "mirror", anon_key, data=b"x" * 1_500_000).json()["body"]) == 1_500_000
    base, _ = served(FUNCTIONS_MAX_BODY=1000)
    assert call(base, "mirror", anon_key, data=b"x" * 1000).status_code == 200
    too_big = call(base, "mirror", anon_key, data=b"x" * 1001)
    assert too_big.status_code == 413 and too_big.headers["sb-error-code"] == "REQUEST_TOO_LARGE"
    chunked = call(base, "mirror", anon_key, data=iter([b"x" * 600, b"x" * 600]))
    assert chunked.status_code == 413


PREFLIGHT = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,apikey,x-client-info,content-type"}  # fmt: skip


@pytest.mark.parametrize("name", ["hello", "nothing_here", "raises"])
def test_a_preflight_is_answered_with_cors_origins_unless_the_function_answers_it(base, name):
    response = requests.options(f"{base}/functions/v1/{name}", headers=PREFLIGHT, timeout=10)
    assert response.status_code == 200 and response.headers["Access-Control-Allow-Origin"] == "*"
    assert "authorization" in response.headers["Access-Control-Allow-Headers"]


def test_a_function_that_answers_cors_itself_is_heard(base, anon_key):
    preflight = requests.options(f"{base}/functions/v1/cors", headers=PREFLIGHT, timeout=10)
    assert preflight.status_code == 200 and preflight.text == "ok"
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://only.example.com"
    assert preflight.headers["Access-Control-Allow-Headers"] == "x-own"
    answered = call(base, "cors", anon_key, headers={"Origin": "https://app.example.com"})
    assert answered.headers["Access-Control-Allow-Origin"] == "https://only.example.com"


# --- supabase-py


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # about the SDK's own internals
def test_supabase_py_invokes_with_every_kind_of_body(base, anon_key):
    pytest.importorskip("supabase")
    with supabase_clients(base) as make:
        check_supabase_py(make(anon_key).functions)


def check_supabase_py(functions):
    from supabase_functions.errors import FunctionsHttpError, FunctionsRelayError

    assert functions.invoke("hello") == b"Hello World"
    as_json = functions.invoke("mirror", {"body": {"a": 1}, "headers": {"response-type": "json"},
                                          "responseType": "json"})  # fmt: skip
    assert as_json["body"] == {"a": 1} and as_json["method"] == "POST"
    text = functions.invoke("mirror", {"body": "some text", "responseType": "json"})
    assert text["body"] == "some text"
    form = functions.invoke("mirror", {"body": "a=1&b=2", "responseType": "json", "headers": {
        "response-type": "form", "content-type": "application/x-www-form-urlencoded"}})  # fmt: skip
    assert form["body"] == [["a", "1"], ["b", "2"]]
    blob = functions.invoke("mirror", {"body": b"\x00\x01binary", "headers": {"response-type": "blob"}})
    assert json.loads(blob)["body"] == "\x00\x01binary"
    assert functions.invoke("stream?n=3", {"method": "GET"}) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    with pytest.raises(FunctionsHttpError) as raised:
        functions.invoke("raises")
    assert raised.value.status == 500
    with pytest.raises(FunctionsHttpError):
        functions.invoke("nothing_here")
    functions.set_auth(other_secret_token())
    with pytest.raises(FunctionsRelayError):
        functions.invoke("hello")


# --- twenty bad calls at once


BAD = ["slow", "spins", "allocates", "raises", "exits", "dies", "leaks?what=thread", "hangs"]


def health_while(base, anon_key, names):
    """Send a call of each of `names` at once and ask /health every 0.1 s until they have all been
    answered: (the slowest /health, the calls' statuses)."""
    statuses, slowest = [], 0.0

    def one(name):
        statuses.append(call(base, name, anon_key).status_code)

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        started = time.monotonic()
        assert requests.get(f"{base}/health", timeout=10).status_code == 200
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.1)
    return slowest, sorted(statuses)


@pytest.mark.alone
def test_health_answers_within_2_s_while_20_bad_calls_run_at_once(served, anon_key):
    """Twenty calls that sleep, spin, allocate, raise, exit, die and leak, all running at once in
    their workers (room for 20, on 32 server threads): /health keeps answering within 2 s, and
    every function answers after."""
    base, _ = served(threads=32, FUNCTIONS_CONCURRENCY=40)
    names = (BAD * 3)[:20]
    slowest, statuses = health_while(base, anon_key, names)
    assert slowest < 2.0 and 546 in statuses and 504 in statuses and 500 in statuses
    assert call(base, "hello", anon_key).text == "Hello World"


@pytest.mark.alone
def test_with_the_default_bounds_functions_never_hold_every_server_thread(served, anon_key):
    """With 8 server threads, functions may hold 4 at once (2 per function): the other calls are
    refused at once, and /health never waits for a thread."""
    base, _ = served()
    slowest, statuses = health_while(base, anon_key, ["slow"] * 10 + ["spins"] * 10)
    assert slowest < 2.0 and statuses.count(546) >= 16


def test_a_function_calls_the_table_api_as_its_caller_or_as_the_service(
    served, database_url, tmp_path, anon_key, app_user_token
):
    """The caller's client sees what the caller's rules give it (its own notes); the service's, every
    note: a function cannot lend its caller more than the caller has."""
    import sqlalchemy as sa

    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, body TEXT)")
        )
    tables = tmp_path / "tables.toml"
    tables.write_text('[tables.notes]\nselect = "owner"\nowner_column = "user_id"\n')
    base, _ = served(TABLES_CONFIG=str(tables))
    token, user_id = app_user_token(base)
    with engine.begin() as connection:
        rows = [{"owner": int(user_id), "body": "mine"}, {"owner": int(user_id) + 1, "body": "theirs"}]
        connection.execute(sa.text("INSERT INTO notes (user_id, body) VALUES (:owner, :body)"), rows)
    engine.dispose()
    seen = call(base, "asks", anon_key, token=token).json()
    assert seen == {
        "caller": [200, [{"body": "mine"}]],
        "service": [200, [{"body": "mine"}, {"body": "theirs"}]],
    }
    anonymous = call(base, "asks", anon_key).json()
    assert anonymous["caller"][1] == [] or anonymous["caller"][0] in (401, 403)


@pytest.mark.slow  # uvicorn, as `python wsgi.py` serves with Realtime on
def test_under_uvicorn_a_stream_arrives_piece_by_piece_and_a_hang_is_a_504(make_app, anon_key):
    from support import serve_with_realtime

    app = make_app(FUNCTIONS_DIR=str(FUNCTIONS), FUNCTIONS_MAX_BODY=3_000_000)
    port, stop = serve_with_realtime(app)
    base = f"http://127.0.0.1:{port}"
    try:
        with call(base, "stream?n=6", anon_key, method="GET", stream=True) as response:
            arrived = [(time.monotonic(), piece) for piece in response.iter_content(chunk_size=None)]
        assert len(arrived) >= 3 and arrived[-1][0] - arrived[0][0] >= 0.15
        assert_failure(call(base, "hangs", anon_key), 504, "IDLE_TIMEOUT")
        assert call(base, "hello", anon_key).text == "Hello World"
        # FUNCTIONS_MAX_BODY, not the other APIs' 1 MB, bounds a function's body
        big = call(base, "mirror", anon_key, data=b"x" * 2_500_000, headers={"response-type": "blob"})
        assert big.status_code == 200 and len(big.json()["body"]) == 2_500_000
        assert call(base, "mirror", anon_key, data=b"x" * 3_000_001).status_code == 413
    finally:
        stop()
        app.extensions["minibase"].function_runner.close()


def test_function_calls_are_counted_by_status_class(served, anon_key, service_key):
    from prometheus_client.parser import text_string_to_metric_families

    base, _ = served(METRICS=True)

    def counted():
        text = requests.get(f"{base}/metrics", headers={"apikey": service_key}, timeout=10).text
        return {
            sample.labels["status"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "minibase_function_calls_total"
        }

    before = counted()
    for name in ("hello", "hello", "raises", "no_such_function"):
        call(base, name, anon_key)
    after = counted()
    assert after.get("2xx", 0) - before.get("2xx", 0) == 2
    assert after.get("5xx", 0) - before.get("5xx", 0) == 1
    assert after.get("4xx", 0) - before.get("4xx", 0) == 1
