"""Traces over OTLP/HTTP to a receiver in the test, decoded with opentelemetry-proto: a span per
request, the caller's traceparent its parent, database statements as its children without values;
and, with tracing off, nothing of OpenTelemetry imported."""

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from database import statements
from runtime import traces
from support import Api

ROOT = Path(__file__).resolve().parent.parent
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP collector's traces endpoint: what each POST /v1/traces carried, decoded."""

    def __init__(self):
        self.spans, self.paths = [], []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler):  # noqa: N802, N805 (http.server's name; the server is `self`)
                body = handler.rfile.read(int(handler.headers["Content-Length"]))
                self.paths.append(handler.path)
                decoded = ExportTraceServiceRequest.FromString(body)
                for resource in decoded.resource_spans:
                    for scope in resource.scope_spans:
                        self.spans.extend((resource.resource, span) for span in scope.spans)
                handler.send_response(200)
                handler.send_header("Content-Type", "application/x-protobuf")
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(handler, *args):  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def receiver(monkeypatch):
    server = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "minibase-under-test")
    monkeypatch.setattr(statements, "statement_spans", None)  # what init_app sets, put back after
    yield server
    server.shutdown()
    server.server_close()


def attributes(span):
    return {item.key: item.value.string_value or item.value.int_value for item in span.attributes}


def test_each_request_is_a_span_under_the_callers_traceparent_with_statements_without_values(
    make_app, anon_key, receiver
):
    app = make_app()
    provider = app.extensions["minibase_traces"]
    try:
        api = Api(app, anon_key)
        parent = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        password = "trace-me-pw-1234"
        signup = api.post(
            "/auth/v1/signup", json={"email": "traced@example.com", "password": password}, headers=parent
        )
        assert signup.status_code == 200
        assert api.get("/rest/v1/", headers=parent).status_code == 200
        assert api.get("/live").status_code == 200  # no traceparent: a trace of its own
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    servers = [span for _, span in receiver.spans if span.kind == span.SPAN_KIND_SERVER]
    assert len(servers) == 3
    routes = {attributes(span).get("http.route"): span for span in servers}
    for route in ("/auth/v1/signup", "/rest/v1/"):
        span = routes[route]
        assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == PARENT_ID, route
    assert routes["/live"].trace_id.hex() != TRACE_ID and not routes["/live"].parent_span_id
    resource = {item.key: item.value.string_value for item in receiver.spans[0][0].attributes}
    assert resource["service.name"] == "minibase-under-test"
    signup_span = routes["/auth/v1/signup"]
    statements = [
        span
        for _, span in receiver.spans
        if span.kind == span.SPAN_KIND_CLIENT and span.trace_id == signup_span.trace_id
    ]
    assert any("INSERT INTO users" in attributes(span).get("db.statement", "") for span in statements)
    in_request = {span.span_id for _, span in receiver.spans if span.trace_id == signup_span.trace_id}
    assert all(span.parent_span_id in in_request for span in statements)
    for span in statements:
        text = str(attributes(span))
        assert "traced@example.com" not in text and password not in text and "$2b$" not in text


def test_traces_are_off_by_default_and_nothing_of_opentelemetry_is_imported(database_url, tmp_path):
    script = f"""
import os, sys
for name in [n for n in os.environ if n.startswith("OTEL_")]:
    del os.environ[name]
from app import create_app
settings = {{"DATABASE_URL": {database_url!r}, "STORAGE_ROOT": {str(tmp_path)!r}}}
app = create_app({{**settings, "JWT_SECRET": "s" * 40}})
assert app.test_client().get("/live").status_code == 200
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
assert not loaded and "minibase_traces" not in app.extensions, loaded
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, False),
    ],
)
def test_opentelemetrys_own_variables_turn_traces_on(environ, on):
    assert traces.wanted(environ) is on
