"""Traces with OpenTelemetry (docs/operations.md#traces), configured by OpenTelemetry's own variables:
on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, unless
OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Each request is a span (the Flask
instrumentation: a W3C `traceparent` sent with it is its parent) and each database statement a
child span with its SQL and no values, exported over OTLP/HTTP in batches by the SDK.

Off, nothing of OpenTelemetry is imported and nothing runs per request. The statements minibase runs
straight on a DBAPI connection (database.statements' prepared reads and writes, which skip
SQLAlchemy's events) get their spans through `statements.statement_spans`."""

import contextlib
import logging
import os

log = logging.getLogger("minibase")
EXPORTERS = ("", "otlp")  # OTEL_TRACES_EXPORTER values served here: OTLP over HTTP (the default)


def wanted(environ=None):
    """Whether OpenTelemetry's variables in `environ` (the process's) ask for traces."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if not (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return False
    if exporter not in EXPORTERS:
        log.warning("OTEL_TRACES_EXPORTER=%s: minibase exports traces over OTLP/HTTP only; off", exporter)
        return False
    return True


def init_app(app, engines):
    """Trace `app`'s requests and the statements of `engines`, when OpenTelemetry's variables ask."""
    if not wanted():
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "minibase"}
    provider = TracerProvider(resource=Resource.create(named))  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*, OTEL_BSP_*
    FlaskInstrumentor.instrument_app(app, tracer_provider=provider, enable_commenter=False)
    tracer = provider.get_tracer("minibase")
    for engine in engines:
        _trace_statements(engine, provider)
    from opentelemetry.trace import SpanKind

    from database import statements

    statements.statement_spans = lambda sql, system: _statement_span(tracer, SpanKind.CLIENT, sql, system)
    app.extensions["minibase_traces"] = provider
    log.info("traces: exported over OTLP/HTTP")
    return provider


def _trace_statements(engine, provider):
    """A span for each statement SQLAlchemy runs on `engine` (its SQL, never its values)."""
    from opentelemetry.instrumentation.sqlalchemy import __version__
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import NoOpMeterProvider

    # The engine's tracer only: SQLAlchemyInstrumentor.instrument would patch create_engine for
    # every engine of the process, once per process.
    meter = NoOpMeterProvider().get_meter("minibase")
    usage = meter.create_up_down_counter("db.client.connections.usage")
    EngineTracer(provider.get_tracer("opentelemetry.instrumentation.sqlalchemy", __version__), engine, usage)


@contextlib.contextmanager
def _statement_span(tracer, kind, sql, system):
    operation = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "SQL"
    attributes = {"db.system": system, "db.statement": sql}
    with tracer.start_as_current_span(operation, kind=kind, attributes=attributes):
        yield
