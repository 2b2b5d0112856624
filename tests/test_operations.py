"""What an operator watches: the probes (/live, /ready), X-Request-Id, the JSON log, and /metrics
(who may read it, and that its counts move by exactly what was sent)."""

import io
import json
import logging
import re
import uuid

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from auth import tokens
from extensions import db
from runtime import logs
from support import SECRET, Api, free_port

# --- probes


def test_live_and_ready_need_no_key_and_answer_ok(app):
    client = app.test_client()
    for path in ("/live", "/ready"):
        response = client.get(path)
        assert response.status_code == 200 and response.json == {"status": "ok"}, path
        assert client.head(path).status_code == 200


def test_ready_names_migrations_behind_the_code(app):
    with app.app_context():
        with db.engine.begin() as connection:
            connection.execute(sa.text("UPDATE minibase_alembic_version SET version_num = '0001'"))
    client = app.test_client()
    response = client.get("/ready")
    assert response.status_code == 503
    assert response.json == {"status": "unavailable", "not_ready": ["migrations"]}
    assert client.get("/live").status_code == 200


def test_ready_names_a_configured_redis_that_does_not_answer(make_app):
    app = make_app(RATE_LIMIT_STORAGE_URI=f"redis://127.0.0.1:{free_port()}")
    response = app.test_client().get("/ready")
    assert response.status_code == 503 and response.json["not_ready"] == ["redis"]
    assert app.test_client().get("/live").status_code == 200


def test_the_settings_page_takes_the_password_out_of_every_url(make_app):
    """The dashboard's settings (dashboard.health.effective_settings): a password in any URL-valued
    setting is masked, Realtime's Redis and a hook's as the database's, and a URL too malformed to
    read is masked whole when it may hold one."""
    from dashboard import health

    app = make_app(
        REALTIME_REDIS_URL="redis://:hunter2@127.0.0.1:6390/0",
        RATE_LIMIT_STORAGE_URI="redis://user:opensesame@127.0.0.1:6390/1",
        HOOK_SEND_EMAIL_URI="https://hook:letmein@127.0.0.1:9/send",
        API_EXTERNAL_URL="https://api.example.com",
    )
    with app.app_context():
        shown = dict(health.effective_settings())
        app.config["REALTIME_REDIS_URL"] = "redis://:hunter2@127.0.0.1:port/0"
        malformed = dict(health.effective_settings())["REALTIME_REDIS_URL"]
    assert shown["REALTIME_REDIS_URL"] == f"redis://:{health.MASK}@127.0.0.1:6390/0"
    assert shown["RATE_LIMIT_STORAGE_URI"] == f"redis://user:{health.MASK}@127.0.0.1:6390/1"
    assert shown["HOOK_SEND_EMAIL_URI"] == f"https://hook:{health.MASK}@127.0.0.1:9/send"
    assert shown["API_EXTERNAL_URL"] == "https://api.example.com"
    assert malformed == health.MASK
    for secret in ("hunter2", "opensesame", "letmein"):
        assert secret not in json.dumps(shown) + malformed


def test_a_database_that_does_not_answer_is_not_ready_but_the_process_is_live(tmp_path):
    from app import create_app

    url = f"mysql+pymysql://root@127.0.0.1:{free_port()}/app"
    settings = {"DATABASE_URL": url, "JWT_SECRET": SECRET, "DB_TIMEOUT": 1, "STORAGE_ROOT": str(tmp_path)}
    app = create_app(settings)
    client = app.test_client()
    assert client.get("/live").status_code == 200
    response = client.get("/ready")
    assert response.status_code == 503 and response.json["not_ready"] == ["database"]
    assert client.get("/health").status_code == 503


# --- request ids


def test_every_response_carries_a_request_id_of_its_own(api):
    answers = [
        api.get("/rest/v1/"),
        api.get("/nowhere"),
        Api(api.app, None).get("/auth/v1/user"),  # no key: a 401
        api.get("/health"),
        api.get("/live"),
    ]
    ids = [answer.headers["X-Request-Id"] for answer in answers]
    assert all(uuid.UUID(made) for made in ids) and len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("req-123", True),
        ("a" * 200, True),
        ("a" * 201, False),
        ("has space", False),
        ("caf\u00e9", False),
        ("", False),
    ],
)
def test_a_request_id_is_taken_only_behind_a_trusted_proxy(make_app, anon_key, sent, kept):
    behind = Api(make_app(TRUSTED_PROXIES=1), anon_key).get("/live", headers={"X-Request-Id": sent})
    assert (behind.headers["X-Request-Id"] == sent) is kept
    direct = Api(make_app(), anon_key).get("/live", headers={"X-Request-Id": "req-123"})
    assert direct.headers["X-Request-Id"] != "req-123"


@pytest.fixture
def captured(monkeypatch):
    """What the service logs, through the served process's writer, as text or JSON lines."""
    writers = []
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # setLevel, not the attribute: it clears each logger's cached answer

    def capture(log_format="text"):
        for name in ("minibase", "minibase.requests"):  # alembic's fileConfig disables the loggers it met
            monkeypatch.setattr(logging.getLogger(name), "disabled", False)
        stream = io.StringIO()
        writer = logs.Writer(stream=stream, interval=3600, log_format=log_format)
        handler = writer.handler()
        logging.getLogger().addHandler(handler)
        writers.append((writer, handler))

        def lines():
            writer.write_pending()
            return stream.getvalue().splitlines()

        return lines

    yield capture
    for _, handler in writers:
        root.removeHandler(handler)
    root.setLevel(level)


def failing_app(make_app, **settings):
    app = make_app(**settings)

    @app.get("/rest/v1/boom")
    def boom():
        raise RuntimeError("boom")

    return app


def test_the_cause_of_a_5xx_names_its_request_id(make_app, anon_key, captured):
    lines = captured()
    response = Api(failing_app(make_app), anon_key).get("/rest/v1/boom")
    assert response.status_code == 500
    made = response.headers["X-Request-Id"]
    cause = [line for line in lines() if "unexpected error on GET /rest/v1/boom" in line]
    assert len(cause) == 1 and cause[0].endswith(f"(request {made})")


# --- the JSON log


def test_json_log_lines_are_objects_with_the_request_fields(make_app, anon_key, captured):
    lines = captured("json")
    api = Api(failing_app(make_app, LOG_FORMAT="json"), anon_key)
    user = api.sign_up(password="pw-" + "x" * 20)
    api.get("/auth/v1/user", token=user["access_token"])
    api.get("/rest/v1/boom")
    written = [json.loads(line) for line in lines()]
    assert all(isinstance(line, dict) for line in written)
    requests_ = [line for line in written if line["logger"] == "minibase.requests"]
    signup, read, boom = requests_
    assert signup["method"] == "POST" and signup["route"] == "/auth/v1/signup" and signup["status"] == 200
    assert signup["role"] == "anon" and signup["user_id"] is None and signup["ip"] == "127.0.0.1"
    assert read["role"] == "authenticated" and read["user_id"] == str(user["user"]["id"])
    assert boom["status"] == 500 and boom["path"] == "/rest/v1/boom"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", boom["time"])
    assert boom["level"] == "INFO"
    assert isinstance(boom["duration_ms"], float)
    cause = next(line for line in written if line["level"] == "ERROR")
    assert cause["request_id"] == boom["request_id"] and "RuntimeError: boom" in cause["exc_info"]


def test_no_secret_reaches_the_log(make_app, anon_key, service_key, captured):
    """A run of sign-up, sign-in, refresh, a key and tokens in query strings, an admin read: none of
    the secrets it used is in any line, in either format."""
    text_lines, json_lines = captured(), captured("json")
    app = make_app(LOG_FORMAT="json")
    api = Api(app, anon_key)
    password = "correct-horse-battery-" + uuid.uuid4().hex
    session = api.sign_up(email="sam@example.com", password=password)
    signed = api.sign_in(email="sam@example.com", password=password).json
    api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": signed["refresh_token"]})
    api.get(f"/auth/v1/user?access_token={signed['access_token']}&apikey={anon_key}")
    api.get(f"/rest/v1/?apikey={service_key}")
    Api(app, service_key).get("/auth/v1/admin/users")
    api.get("/auth/v1/verify?type=recovery&token=123456&token_hash=abcdef0123456789&redirect_to=x")
    with app.app_context():
        query = sa.text("SELECT password FROM users WHERE email = 'sam@example.com'")
        hashed = db.session.execute(query).scalar()
    secrets = [password, session["access_token"], signed["access_token"], signed["refresh_token"], anon_key,
               service_key, SECRET, hashed, "abcdef0123456789"]  # fmt: skip
    written = text_lines() + json_lines()
    assert len(written) >= 14
    for line in written:
        assert not [secret for secret in secrets if secret in line], line


# --- /metrics


def scrape(client, **headers):
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type.startswith("text/plain; version=")
    found = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def requests_counted(found, api, status):
    return found.get(("minibase_http_requests_total", (("api", api), ("status", status))), 0)


def test_metrics_are_off_by_default(app, service_key):
    response = app.test_client().get("/metrics", headers={"apikey": service_key})
    assert response.status_code == 404


def test_metrics_count_exactly_the_requests_sent_by_api_and_status_class(make_app, anon_key, service_key):
    app = make_app(METRICS=True)
    client, api = app.test_client(), Api(app, anon_key)
    key = {"apikey": service_key}
    before = scrape(client, **key)
    for _ in range(3):
        assert api.get("/rest/v1/").status_code == 200
    for _ in range(2):
        assert api.get("/auth/v1/user").status_code == 401
    assert api.get("/storage/v1/bucket/none").status_code in (400, 404)
    assert api.get("/live").status_code == 200
    after = scrape(client, **key)
    assert requests_counted(after, "rest", "2xx") - requests_counted(before, "rest", "2xx") == 3
    assert requests_counted(after, "auth", "4xx") - requests_counted(before, "auth", "4xx") == 2
    assert requests_counted(after, "storage", "4xx") - requests_counted(before, "storage", "4xx") == 1
    # /live, and the first scrape itself
    assert requests_counted(after, "other", "2xx") - requests_counted(before, "other", "2xx") == 2
    histogram = ("minibase_http_request_duration_seconds_count", (("api", "rest"),))
    assert after[histogram] - before.get(histogram, 0) == 3
    names = {name for name, _ in after}
    assert {
        "minibase_db_connections_in_use",
        "minibase_db_retries_total",
        "minibase_realtime_sockets",
    } <= names


def test_a_worker_file_not_yet_sized_leaves_the_others_counted(make_app, service_key, tmp_path, monkeypatch):
    # A worker creates its file before it sizes it; one killed in between leaves it empty for good.
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    app = make_app(METRICS=True)
    folder = tmp_path / "workers"
    folder.mkdir()
    counted = MmapedDict(str(folder / "counter_4001.db"))
    name = "minibase_http_requests_total"
    counted.write_value(mmap_key(name, name, ("api", "status"), ("rest", "2xx"), "HTTP requests"), 5.0, 0.0)
    counted.close()
    (folder / "counter_4002.db").touch()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    found = scrape(app.test_client(), apikey=service_key)
    assert requests_counted(found, "rest", "2xx") == 5


def test_metrics_are_refused_without_the_service_key(make_app, anon_key, service_key):
    app = make_app(METRICS=True)
    client = app.test_client()
    user = Api(app, anon_key).sign_up()["access_token"]
    other = tokens.api_key("service_role", "another-secret-" + "y" * 32)
    refused = [
        ({}, 401),
        ({"apikey": anon_key}, 403),
        ({"Authorization": f"Bearer {anon_key}"}, 403),
        ({"Authorization": f"Bearer {user}"}, 403),
        ({"apikey": user}, 403),
        ({"Authorization": f"Bearer {other}"}, 403),
        ({"Authorization": "Bearer not.a.token"}, 403),
        ({"Authorization": f"Basic {service_key}"}, 401),
        ({"apikey": "\u00e9" * 10}, 403),
    ]
    for headers, status in refused:
        response = client.get("/metrics", headers=headers)
        assert response.status_code == status, headers
        assert b"minibase_" not in response.data
    # the same request succeeds with the service key, either way Prometheus can send it
    assert client.get("/metrics", headers={"apikey": service_key}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {service_key}"}).status_code == 200


def test_metrics_allow_lets_listed_addresses_read_without_a_key(make_app):
    listed = make_app(METRICS=True, METRICS_ALLOW=metrics_allow("10.0.0.0/8, 127.0.0.1"))
    assert listed.test_client().get("/metrics").status_code == 200
    elsewhere = make_app(METRICS=True, METRICS_ALLOW=metrics_allow("10.0.0.0/8"))
    assert elsewhere.test_client().get("/metrics").status_code == 401
    # behind no trusted proxy, X-Forwarded-For chooses nothing
    spoofed = elsewhere.test_client().get("/metrics", headers={"X-Forwarded-For": "10.1.2.3"})
    assert spoofed.status_code == 401


def metrics_allow(raw):
    import variables

    return variables.VARIABLES["METRICS_ALLOW"][1]("METRICS_ALLOW", raw)


def test_a_bad_metrics_allow_is_refused_at_start():
    import config
    import variables

    with pytest.raises(variables.ConfigError, match="METRICS_ALLOW"):
        config.from_environment({"METRICS_ALLOW": "10.0.0.300"})


def test_database_retries_and_503s_are_counted(make_app, service_key, anon_key):
    from blueprints import responses
    from database import failures

    app = make_app(METRICS=True)
    client = app.test_client()
    before = scrape(client, apikey=service_key)
    with app.test_request_context("/rest/v1/items"):
        responses.unavailable()
        with pytest.raises(sa.exc.OperationalError):
            failures.counted(deadlock())
            raise deadlock()
    after = scrape(client, apikey=service_key)
    assert after[("minibase_db_timeouts_total", ())] - before[("minibase_db_timeouts_total", ())] == 1
    assert after[("minibase_db_deadlocks_total", ())] - before[("minibase_db_deadlocks_total", ())] == 1


def deadlock():
    import pymysql

    return sa.exc.OperationalError("UPDATE", {}, pymysql.err.OperationalError(1213, "Deadlock found"))


# --- the dashboard's figures


def test_the_health_figures_come_from_the_metrics(make_app, anon_key, monkeypatch):
    import collections

    from dashboard import figures

    monkeypatch.setattr(figures, "_readings", collections.deque(maxlen=figures.KEPT))
    app = failing_app(make_app, METRICS=True)
    api = Api(app, anon_key)
    with app.app_context():
        figures.figures()  # the reading the next one is taken against
    for _ in range(3):
        assert api.get("/rest/v1/").status_code == 200
    assert api.get("/rest/v1/boom").status_code == 500
    with app.app_context():
        shown = figures.figures()
    assert shown.error_rate == 0.25 and shown.request_rate > 0 and shown.p95_seconds > 0
    assert shown.realtime_sockets == 0 and shown.webhook_backlog == 0


def test_the_95th_percentile_is_prometheus_histogram_quantile():
    from dashboard import figures

    buckets = {0.1: 50.0, 0.5: 90.0, 1.0: 100.0, float("inf"): 100.0}
    assert figures._quantile(0.95, buckets) == pytest.approx(0.75)
    assert figures._quantile(0.95, {0.1: 0.0, float("inf"): 0.0}) is None
    assert figures._quantile(0.95, {0.1: 1.0, float("inf"): 10.0}) == 0.1  # past the last bound


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("POST", "/metrics", {405}),
        ("DELETE", "/ready", {405}),
        ("PUT", "/live", {405}),
        ("GET", "/metrics/..", {404}),
        ("GET", "/metrics%00", {404}),
        ("GET", "/%2e%2e/metrics", {404}),
        ("GET", "/metrics/\u00e9", {404}),
        ("GET", "/ready?apikey=" + "x" * 5000, {200}),
    ],
)
def test_hostile_requests_to_the_probes_and_metrics(make_app, method, path, statuses):
    client = make_app(METRICS=True).test_client()
    response = client.open(path, method=method)
    assert response.status_code in statuses, response.get_data(as_text=True)
    assert b"minibase_http" not in response.data and "X-Request-Id" in response.headers


def test_a_body_past_the_limit_to_metrics_is_refused_without_the_figures(make_app):
    client = make_app(METRICS=True).test_client()
    response = client.post("/metrics", data=b"x" * (2 * 1024 * 1024))
    assert response.status_code in (405, 413) and b"minibase_http" not in response.data


def moved(before, after, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0) - before.get(key, 0)


def test_storage_bytes_in_and_out_are_counted(make_app, tmp_path, service_key):
    config = tmp_path / "buckets.toml"
    config.write_text('[buckets.files]\nselect = "anon"\ninsert = "anon"\n')
    app = make_app(METRICS=True, TABLES_CONFIG=str(config), STORAGE_ROOT=str(tmp_path / "storage"))
    service, client = Api(app, service_key), app.test_client()
    before = scrape(client, apikey=service_key)
    sent = bytes(range(256)) * 4
    uploaded = service.post(
        "/storage/v1/object/files/a.bin", data=sent, headers={"Content-Type": "text/plain"}
    )
    assert uploaded.status_code == 200, uploaded.json
    assert service.get("/storage/v1/object/files/a.bin", buffered=True).data == sent
    part = service.get("/storage/v1/object/files/a.bin", headers={"Range": "bytes=0-99"}, buffered=True)
    assert part.status_code == 206 and len(part.data) == 100
    assert service.get("/storage/v1/object/info/files/a.bin").status_code == 200  # its row: not counted
    assert service.get("/storage/v1/object/files/none.bin").status_code in (400, 404)
    after = scrape(client, apikey=service_key)
    assert moved(before, after, "minibase_storage_bytes_in_total") == len(sent)
    assert moved(before, after, "minibase_storage_bytes_out_total") == len(sent) + 100


def test_hook_calls_and_failures_are_counted(make_app, anon_key, service_key):
    from hook_server import HOOK_SECRET, HookServer

    hook = HookServer()
    try:
        settings = {
            "HOOK_CUSTOM_ACCESS_TOKEN_ENABLED": True,
            "HOOK_CUSTOM_ACCESS_TOKEN_URI": hook.url,
            "HOOK_CUSTOM_ACCESS_TOKEN_SECRETS": HOOK_SECRET,
        }
        app = make_app(METRICS=True, **settings)
        api, client = Api(app, anon_key), app.test_client()
        before = scrape(client, apikey=service_key)
        hook.answer = lambda payload: (200, "application/json", b'{"claims": %s}' % hook_claims(payload))
        assert api.sign_up(email="hooked@example.com")["access_token"]
        hook.answer = lambda payload: (500, "text/plain", b"down")
        assert api.sign_in(email="hooked@example.com").status_code >= 400
        after = scrape(client, apikey=service_key)
    finally:
        hook.stop()
    calls = moved(before, after, "minibase_hook_calls_total", hook="custom_access_token")
    assert calls == len(hook.calls) >= 2
    assert moved(before, after, "minibase_hook_failures_total", hook="custom_access_token") == 1


def hook_claims(payload):
    return json.dumps(payload["claims"]).encode()


def test_a_pool_that_stays_busy_is_a_503_counted_as_a_database_timeout(make_app, service_key):
    app = make_app(METRICS=True)

    @app.get("/rest/v1/busy")
    def busy():
        raise sa.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached")

    client = app.test_client()
    before = scrape(client, apikey=service_key)
    response = Api(app, service_key).get("/rest/v1/busy")
    assert response.status_code == 503 and response.json["code"] == 503
    after = scrape(client, apikey=service_key)
    assert moved(before, after, "minibase_db_timeouts_total") == 1
