"""`function = "NAME"` targets: a webhook's change and a schedule's due time reach a real function
(runner worker processes) as the service, with the payload as its JSON body; a function that fails
makes a failed attempt (retried) or a failed run, with its status recorded."""

import json

import sqlalchemy as sa

from support import eventually
from webhooks import outbox, schedules, worker

RECORDER = """
import json, os

def handler(request, caller):
    with open(os.environ["RECORD_TO"], "a") as file:
        file.write(json.dumps({"body": request.json(), "role": caller.role}) + "\\n")
    return {"ok": True}
"""
FAILING = """
def handler(request, caller):
    raise RuntimeError("no")
"""


def test_a_webhook_and_a_schedule_call_functions_as_the_service(
    make_app, database_url, tmp_path, monkeypatch
):
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RECORD_TO", str(record))
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "recorder.py").write_text(RECORDER)
    (functions / "failing.py").write_text(FAILING)
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, item VARCHAR(20))")
    config = tmp_path / "tables.toml"
    config.write_text(
        '[webhooks.to_function]\ntable = "orders"\nfunction = "recorder"\n\n'
        '[webhooks.to_failing]\ntable = "orders"\nfunction = "failing"\n\n'
        '[schedules.nightly]\ncron = "@daily"\nfunction = "recorder"\n\n'
        '[schedules.broken]\ncron = "@daily"\nfunction = "failing"\n'
    )
    app = make_app(
        TABLES_CONFIG=str(config),
        FUNCTIONS_DIR=str(functions),
        WEBHOOK_POLL_SECONDS=0.05,
        WEBHOOK_RETRY_SECONDS=0.1,
    )
    background = worker.Background(app).start()
    try:
        with app.app_context():
            eventually(lambda: outbox.listing() is not None and _seen(app) == 2, 30)
        with engine.begin() as connection:
            connection.exec_driver_sql("INSERT INTO orders (id, item) VALUES (1, 'pen')")

        def recorded():
            return record.exists() and record.read_text().splitlines()

        try:
            lines = eventually(recorded, 120)
        except AssertionError:
            with app.app_context():
                raise AssertionError(
                    f"the function was not called: {outbox.listing('to_function')}"
                ) from None
        assert json.loads(lines[0]) == {
            "body": {"type": "INSERT", "table": "orders", "schema": "public",
                     "record": {"id": 1, "item": "pen"}, "old_record": None},
            "role": "service_role",
        }  # fmt: skip

        def failing():
            with app.app_context():
                return outbox.listing("to_failing")

        tried = eventually(lambda: failing() and len(failing()[0]["attempts"]) >= 2 and failing(), 60)
        assert tried[0]["status"] == "pending" and tried[0]["attempts"][0]["status"] == 500
        assert tried[0]["last_error"].startswith("function failing answered 500")
    finally:
        background.stop()
    runner = app.test_cli_runner()
    ran = runner.invoke(args=["schedules", "run", "nightly"])
    if "WORKER_LIMIT" in ran.output:  # the function runner's own limits, now and then on a loaded machine
        ran = runner.invoke(args=["schedules", "run", "nightly"])
    assert "nightly: succeeded" in ran.output
    body = json.loads(record.read_text().splitlines()[-1])["body"]
    assert body["schedule"] == "nightly" and body["scheduled_at"].endswith("Z")
    broken = runner.invoke(args=["schedules", "run", "broken"])
    assert broken.exit_code == 1 and "function failing answered 500" in broken.output
    with app.app_context():
        assert schedules.history("broken")[0]["status"] == "failed"
    engine.dispose()


def _seen(app):
    """How many hooks have started, once their triggers are made (0 before)."""
    with outbox.db.engine.connect() as connection:
        if outbox.db.engine.dialect.name == "sqlite":
            query = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'minibase_wh_%'"
        else:
            query = (
                "SELECT count(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "
                "AND TRIGGER_NAME LIKE 'minibase\\_wh\\_%%'"
            )
        if connection.exec_driver_sql(query).scalar() != 3:
            return 0
        return connection.execute(
            sa.select(sa.func.count()).select_from(outbox.CALLOUTS).where(outbox.CALLOUTS.c.kind == "webhook")
        ).scalar()
