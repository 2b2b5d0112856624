"""Schedules on a clock the test turns (webhooks.schedules.Scheduler.tick takes the time): two
instances over three minutes of `* * * * *` run it exactly three times, however their looks
interleave or race; a run still going makes the next one skipped and recorded; failing SQL records
its error and runs again next time; a run missed while nothing was up happens once at start; a URL
target gets a signed body; `flask --app app schedules run NAME` runs one now. On both databases."""

import threading
import time
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from extensions import db
from receiver import SECRET, Receiver
from tables_toml import webhooks as settings
from variables import ConfigError
from webhooks import outbox, schedules

NOON = datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC).timestamp()


def make_ticks(url):
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE ticks (n INTEGER)")
    engine.dispose()


def app_with(make_app, database_url, tmp_path, text, name="tables.toml"):
    config = tmp_path / name
    config.write_text(text)
    return make_app(TABLES_CONFIG=str(config), WEBHOOK_SECRET=SECRET)


def ticks(app):
    with app.app_context(), db.engine.connect() as connection:
        return connection.exec_driver_sql("SELECT count(*) FROM ticks").scalar()


def runs(app, name):
    with app.app_context():
        return list(reversed(schedules.history(name, limit=100)))


def look(app, scheduler, now):
    """One look at the clock by `scheduler`, its runs run to their end here."""
    with app.app_context():
        for schedule, run_id, due in scheduler.tick(now):
            schedules.run(schedule, run_id, due, scheduler.secret)


EVERY_MINUTE = '[schedules.tick]\ncron = "* * * * *"\nsql = "INSERT INTO ticks (n) VALUES (1)"\n'


def test_every_minute_over_three_minutes_runs_three_times_on_two_instances(make_app, database_url, tmp_path):
    make_ticks(database_url)
    first = app_with(make_app, database_url, tmp_path, EVERY_MINUTE)
    second = app_with(make_app, database_url, tmp_path, EVERY_MINUTE, "second.toml")
    one = schedules.Scheduler(first.extensions["minibase"].tables_toml.schedules, SECRET, "one")
    two = schedules.Scheduler(second.extensions["minibase"].tables_toml.schedules, SECRET, "two")
    for step in range(0, 181, 7):  # 12:00:30 to 12:03:31, each looking every 7 s, the second 3 s later
        look(first, one, NOON + step)
        look(second, two, NOON + step + 3)
    assert ticks(first) == 3
    done = runs(first, "tick")
    assert [run["scheduled_at"] for run in done] == [
        "2026-11-29T12:01:00Z",
        "2026-11-29T12:02:00Z",
        "2026-11-29T12:03:00Z",
    ]
    assert {run["status"] for run in done} == {"succeeded"}


def test_instances_racing_for_one_due_time_run_it_once(make_app, database_url, tmp_path):
    make_ticks(database_url)
    apps = [app_with(make_app, database_url, tmp_path, EVERY_MINUTE, f"{n}.toml") for n in range(4)]
    with apps[0].app_context():
        outbox.first_seen("schedule", "tick", NOON)
    barrier, claimed = threading.Barrier(len(apps)), []

    def race(app, n):
        scheduler = schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, f"i{n}")
        with app.app_context():
            barrier.wait()
            claimed.extend(scheduler.tick(NOON + 60))

    threads = [threading.Thread(target=race, args=(app, n)) for n, app in enumerate(apps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(claimed) == 1
    assert len(runs(apps[0], "tick")) == 1


def test_a_run_whose_instance_died_after_claiming_it_never_runs_and_is_marked_lost(
    make_app, database_url, tmp_path
):
    """An instance claims the 12:01 run and dies before running it: its claim committed, nothing
    run. No instance runs 12:01 after that, however often they look (at most once). While it stays
    `running` the 12:02 run is skipped; past its timeout and a minute it is marked lost, and 12:03
    runs once, of two instances racing for it."""
    make_ticks(database_url)
    text = EVERY_MINUTE + "timeout = 5\n"
    apps = [app_with(make_app, database_url, tmp_path, text, f"{n}.toml") for n in range(3)]
    dead, two, three = (
        schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, name)
        for app, name in zip(apps, ("dead", "two", "three"), strict=True)
    )
    with apps[0].app_context():
        outbox.first_seen("schedule", "tick", NOON)
        assert len(dead.tick(NOON + 60)) == 1  # claimed, and never run: the instance is gone
    for step in range(60, 125, 4):
        look(apps[1], two, NOON + step)
    assert ticks(apps[1]) == 0
    barrier = threading.Barrier(2)

    def race(app, scheduler):
        barrier.wait()
        look(app, scheduler, NOON + 180)

    threads = [threading.Thread(target=race, args=pair) for pair in ((apps[1], two), (apps[2], three))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert ticks(apps[1]) == 1
    done = [(run["scheduled_at"][11:16], run["status"], run["error"]) for run in runs(apps[1], "tick")]
    assert done == [
        ("12:01", "failed", "lost: the instance running it stopped"),
        ("12:02", "skipped", "the run before it was still going"),
        ("12:03", "succeeded", None),
    ]


def test_a_run_still_going_makes_the_next_skipped_and_recorded(make_app, database_url, tmp_path):
    app = make_app()
    held, calls = threading.Event(), []

    def slow():
        calls.append(1)
        held.wait(30)

    schedules.register(app, "slow", "* * * * *", slow)
    with pytest.raises(ValueError, match="exists already"):
        schedules.register(app, "slow", "@daily", slow)
    with pytest.raises(ValueError, match="cron"):
        schedules.register(app, "other", "every day", slow)
    scheduler = schedules.Scheduler(schedules.planned(app.extensions["minibase"]), SECRET, "one")
    with app.app_context():
        outbox.first_seen("schedule", "slow", NOON)
        started = scheduler.tick(NOON + 60)
        assert len(started) == 1
        thread = schedules.start_run(*started[0], SECRET, app)
        assert scheduler.tick(NOON + 120) == []
        held.set()
        thread.join(10)
        assert len(scheduler.tick(NOON + 180)) == 1
    statuses = [(run["scheduled_at"][11:16], run["status"]) for run in runs(app, "slow")]
    assert statuses == [("12:01", "succeeded"), ("12:02", "skipped"), ("12:03", "running")]
    assert runs(app, "slow")[1]["error"] == "the run before it was still going"
    assert len(calls) == 1


def test_failing_sql_records_its_error_and_runs_again_next_time(make_app, database_url, tmp_path):
    app = app_with(make_app, database_url, tmp_path, EVERY_MINUTE)
    scheduler = schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, "one")
    look(app, scheduler, NOON)
    look(app, scheduler, NOON + 60)  # no table ticks yet
    make_ticks(database_url)
    look(app, scheduler, NOON + 120)
    first, second = runs(app, "tick")
    assert first["status"] == "failed" and "ticks" in first["error"]
    assert "traceback" not in first["error"].lower()
    assert second["status"] == "succeeded" and ticks(app) == 1


def test_a_run_missed_while_nothing_was_up_happens_once_at_start(make_app, database_url, tmp_path):
    make_ticks(database_url)
    daily = '[schedules.nightly]\ncron = "@daily"\nsql = "INSERT INTO ticks (n) VALUES (1)"\n'
    app = app_with(make_app, database_url, tmp_path, daily)
    planned = app.extensions["minibase"].tables_toml.schedules
    look(app, schedules.Scheduler(planned, SECRET, "before"), NOON)  # first seen at noon: nothing due
    assert ticks(app) == 0
    later = NOON + 3 * 86400 + 3600  # three midnights passed while nothing was up
    restarted = schedules.Scheduler(planned, SECRET, "after")
    look(app, restarted, later)
    look(app, restarted, later + 60)
    look(app, schedules.Scheduler(planned, SECRET, "another"), later + 120)
    assert ticks(app) == 1
    assert [run["scheduled_at"] for run in runs(app, "nightly")] == ["2026-12-02T00:00:00Z"]


def test_a_url_target_gets_a_signed_body_and_a_500_is_a_failed_run(make_app, database_url, tmp_path):
    receiver = Receiver()
    try:
        app = app_with(
            make_app,
            database_url,
            tmp_path,
            f'[schedules.ping]\ncron = "*/5 * * * *"\nurl = "{receiver.url}"\n',
        )
        scheduler = schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, "one")
        look(app, scheduler, NOON)
        look(app, scheduler, NOON + 300)
        receiver.answer = lambda call: 500
        look(app, scheduler, NOON + 600)
        assert [call["payload"] for call in receiver.calls] == [
            {"schedule": "ping", "scheduled_at": "2026-11-29T12:05:00Z"},
            {"schedule": "ping", "scheduled_at": "2026-11-29T12:10:00Z"},
        ]
        assert all(call["verified"] for call in receiver.calls)
        assert [run["status"] for run in runs(app, "ping")] == ["succeeded", "failed"]
        assert runs(app, "ping")[1]["error"].startswith("answered 500")
    finally:
        receiver.stop()


def test_the_command_runs_a_schedule_now(make_app, database_url, tmp_path):
    make_ticks(database_url)
    app = app_with(make_app, database_url, tmp_path, EVERY_MINUTE)
    for _ in range(3):  # three runs by hand in about one second: each recorded
        result = app.test_cli_runner().invoke(args=["schedules", "run", "tick"])
        assert result.exit_code == 0, result.output
        assert "tick: succeeded" in result.output
    assert ticks(app) == 3
    assert [(run["status"], run["by_hand"]) for run in runs(app, "tick")] == [("succeeded", True)] * 3
    # a run by hand at a due time's very second leaves that due time's own run to happen
    scheduler = schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, "one")
    now = time.time()
    with app.app_context():
        outbox.first_seen("schedule", "tick", 0)
        assert len(scheduler.tick(now - now % 60 + 0.5)) == 1
    missing = app.test_cli_runner().invoke(args=["schedules", "run", "nope"])
    assert missing.exit_code != 0 and "no schedule named 'nope'" in missing.output


def test_the_admin_api_lists_the_runs(make_app, database_url, tmp_path, service_key):
    make_ticks(database_url)
    app = app_with(make_app, database_url, tmp_path, EVERY_MINUTE)
    app.test_cli_runner().invoke(args=["schedules", "run", "tick"])
    headers = {"apikey": service_key, "Authorization": f"Bearer {service_key}"}
    body = app.test_client().get("/auth/v1/admin/schedules/runs?schedule=tick", headers=headers).get_json()
    assert [run["status"] for run in body["runs"]] == ["succeeded"]
    assert set(body["runs"][0]) == {
        "id",
        "schedule",
        "scheduled_at",
        "by_hand",
        "status",
        "started_at",
        "ended_at",
        "error",
    }


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"sql": "SELECT 1"}, "cron"),
        ({"cron": "61 * * * *", "sql": "SELECT 1"}, "cron"),
        ({"cron": "* * *", "sql": "SELECT 1"}, "cron"),
        ({"cron": "@fortnightly", "sql": "SELECT 1"}, "cron"),
        ({"cron": "* * * * *"}, "exactly one target"),
        ({"cron": "* * * * *", "sql": "SELECT 1", "url": "http://x/"}, "exactly one target"),
        ({"cron": "* * * * *", "function": "../x"}, "function"),
        ({"cron": "* * * * *", "sql": "SELECT 1", "every": 2}, "every"),
    ],
)
def test_a_wrong_schedule_is_refused_naming_its_key(entry, named):
    with pytest.raises(ConfigError, match=named) as refused:
        settings.parse({"schedules": {"s": entry}})
    assert "[schedules.s]" in str(refused.value)


def test_the_shorthands_are_five_fields():
    parsed = settings.parse(
        {"schedules": {k.strip("@"): {"cron": k, "sql": "SELECT 1"} for k in settings.SHORTHANDS}}
    )[1]
    assert parsed["hourly"].cron == "0 * * * *" and parsed["weekly"].cron == "0 0 * * 0"
    moment = datetime(2026, 11, 29, 12, 30, tzinfo=UTC)
    assert schedules.due_before(parsed["daily"], moment) == datetime(2026, 11, 29, tzinfo=UTC)


def test_runs_are_counted_by_outcome_in_the_metrics(make_app, database_url, tmp_path, service_key):
    from prometheus_client.parser import text_string_to_metric_families

    config = tmp_path / "tables.toml"
    config.write_text(EVERY_MINUTE)
    app = make_app(TABLES_CONFIG=str(config), WEBHOOK_SECRET=SECRET, METRICS=True)

    def counted():
        text = app.test_client().get("/metrics", headers={"apikey": service_key}).get_data(as_text=True)
        return {
            sample.labels["outcome"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "minibase_schedule_runs_total"
        }

    before = counted()
    scheduler = schedules.Scheduler(app.extensions["minibase"].tables_toml.schedules, SECRET, "one")
    look(app, scheduler, NOON)
    look(app, scheduler, NOON + 60)  # no table ticks yet: failed
    make_ticks(database_url)
    look(app, scheduler, NOON + 120)
    look(app, scheduler, NOON + 180)
    after = counted()
    assert after.get("failed", 0) - before.get("failed", 0) == 1
    assert after.get("succeeded", 0) - before.get("succeeded", 0) == 2
