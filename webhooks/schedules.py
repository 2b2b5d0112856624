"""Schedules: each due run of each schedule happens once across every instance. A run is a row per
(schedule, due time) under a unique key: the instance whose INSERT makes it runs it, and any other
that reaches the same due time finds the key taken (on Galera, its commit fails certification).
A run still going when the next one is due makes that one `skipped`, recorded the same way; a
schedule that existed before the instances stopped catches up on its latest missed due time once,
at start; one first seen now starts from its next due time. A run left `running` by an instance that
died is marked failed once it is past the schedule's timeout and a minute, so the next can run."""

import logging
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import cronsim
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

import metrics
from extensions import db
from models.changes import ScheduleRun
from tables_toml import webhooks as settings
from variables import ConfigError
from webhooks import functions, outbox, sending

log = logging.getLogger("minibase")

RUNS = ScheduleRun.__table__
LOST_AFTER = 60.0  # seconds past a schedule's timeout before a run still `running` is taken as lost
ERROR_CHARS = 1000
MANUAL_TRIES = 60  # runs by hand of one schedule recorded in one second


def register(app, name, cron, call, timeout=settings.DEFAULT_RUN_TIMEOUT):
    """Add an internal schedule to `app` before it serves: `call()` (no arguments, in the app's
    context) runs at each due time of the cron line `cron`, once across the instances, recorded and
    shown like tables.toml's. A ValueError when the name is taken or the line is not cron."""
    state = app.extensions["minibase"]
    schedules = state.internal_schedules
    if name in schedules or name in state.tables_toml.schedules:
        raise ValueError(f"a schedule named {name!r} exists already")
    document = {"schedules": {name: {"cron": cron, "sql": "-", "timeout": timeout}}}
    try:
        schedule = settings.parse(document, source="the schedule")[1][name]
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    schedules[name] = replace(schedule, target=settings.Target(call=call))
    return schedules[name]


def planned(state):
    """{name: Schedule}: tables.toml's and those code added (register)."""
    return {**state.tables_toml.schedules, **state.internal_schedules}


def due_before(schedule, moment):
    """The latest time at or before `moment` (a UTC datetime) the schedule is due, to the second."""
    after = moment.replace(microsecond=0) + timedelta(seconds=1)
    return next(cronsim.CronSim(schedule.cron, after, reverse=True))


def _epoch(moment):
    return int(moment.timestamp())


def _iso(epoch):
    return datetime.fromtimestamp(abs(epoch), UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Scheduler:
    """This instance's look at the clock: which due time of each schedule it has handled."""

    def __init__(self, schedules, secret, instance=outbox.INSTANCE):
        self.schedules = schedules
        self.instance = instance
        self.secret = secret
        self.handled = {}  # name -> the due time (epoch seconds) last handled here
        self.since = {}  # name -> when any instance first saw it

    def tick(self, now):
        """Claim the runs due by `now` (epoch seconds) that no instance claimed yet; the runs this
        instance must now run: [(schedule, run id, due time)]."""
        started = []
        moment = datetime.fromtimestamp(now, UTC)
        for schedule in self.schedules.values():
            due = _epoch(due_before(schedule, moment))
            if self.handled.get(schedule.name) == due:
                continue
            if schedule.name not in self.since:
                self.since[schedule.name] = outbox.first_seen("schedule", schedule.name, now)
            self.lose_stale(schedule, now)
            if due >= self.since[schedule.name]:
                run_id = claim(schedule, due, now, self.instance)
                if run_id is not None:
                    started.append((schedule, run_id, due))
            self.handled[schedule.name] = due
        return started

    def lose_stale(self, schedule, now):
        """Mark failed the runs of `schedule` left `running` past its timeout (their instance died)."""
        with db.engine.begin() as connection:
            connection.execute(
                sa.update(RUNS)
                .where(
                    RUNS.c.schedule == schedule.name,
                    RUNS.c.status == "running",
                    RUNS.c.started_at < now - schedule.timeout - LOST_AFTER,
                )
                .values(status="failed", ended_at=now, error="lost: the instance running it stopped")
            )


def claim(schedule, due, now, instance=outbox.INSTANCE):
    """The id of the run of `schedule` at `due` if this call made it (to be run here), else None. It
    is made `skipped` instead when an earlier run of the schedule is still going."""
    try:
        with db.engine.begin() as connection:
            going = connection.execute(
                sa.select(sa.func.count())
                .select_from(RUNS)
                .where(RUNS.c.schedule == schedule.name, RUNS.c.status == "running", RUNS.c.due_at < due)
            ).scalar()
            values = {
                "schedule": schedule.name,
                "due_at": due,
                "status": "skipped" if going else "running",
                "started_at": now,
                "ended_at": now if going else None,
                "error": "the run before it was still going" if going else None,
                "instance": instance,
            }
            made = connection.execute(outbox.insert_ignoring_duplicates(RUNS, [values])).rowcount
            if made != 1:
                return None
            if going:
                log.warning(
                    "schedules: %s at %s skipped: the run before it is still going", schedule.name, _iso(due)
                )
                return None
            return connection.execute(
                sa.select(RUNS.c.id).where(RUNS.c.schedule == schedule.name, RUNS.c.due_at == due)
            ).scalar_one()
    except DBAPIError as exc:  # Galera: another node's run won certification
        log.info(
            "schedules: %s at %s was claimed elsewhere: %s", schedule.name, _iso(due), outbox._first(exc)
        )
        return None


def run(schedule, run_id, due, secret):
    """Run the schedule's target now and record the end: (status, error)."""
    error = None
    try:
        error = _call(schedule, due, secret)
    except Exception as exc:  # the operator's SQL or code: recorded, and the schedule runs next time
        log.warning("schedules: %s at %s failed: %s", schedule.name, _iso(due), outbox._first(exc))
        error = outbox._first(exc)
    status = "failed" if error else "succeeded"
    metrics.SCHEDULE_RUNS.labels(status).inc()
    try:
        with db.engine.begin() as connection:
            connection.execute(
                sa.update(RUNS)
                .where(RUNS.c.id == run_id, RUNS.c.status == "running")
                .values(status=status, ended_at=time.time(), error=error[:ERROR_CHARS] if error else None)
            )
    except DBAPIError as exc:
        log.error(
            "schedules: the end of %s at %s could not be recorded: %s",
            schedule.name,
            _iso(due),
            outbox._first(exc),
        )
    return status, error


def _call(schedule, due, secret):
    """None when the target did its work; else what went wrong."""
    target = schedule.target
    if target.call is not None:
        target.call()
        return None
    if target.sql is not None:
        with db.engine.begin() as connection:
            statement = target.sql if db.engine.dialect.name == "sqlite" else target.sql.replace("%", "%%")
            connection.exec_driver_sql(statement)
        return None
    body = {"schedule": schedule.name, "scheduled_at": _iso(due)}
    if target.function is not None:
        return functions.call(target.function, body).error
    outcome = sending.post(
        target.url,
        sending.body_of(body),
        target.headers,
        target.secret or secret,
        f"{schedule.name}_{due}",
        target.timeout,
    )
    return None if outcome.ok else outcome.error


def run_now(schedule, secret):
    """`flask --app app schedules run NAME`: a run now, recorded as the others: (status, error). Its
    due_at is the time asked, negated: a run by hand never takes the key of a due time, so the cron's
    own run of that second still happens (a second run by hand in one second takes the one before)."""
    now = time.time()
    due = -int(now)
    with db.engine.begin() as connection:
        for due in range(-int(now), -int(now) - MANUAL_TRIES, -1):
            made = connection.execute(
                outbox.insert_ignoring_duplicates(
                    RUNS,
                    [{"schedule": schedule.name, "due_at": due, "status": "running", "started_at": now,
                      "instance": outbox.INSTANCE}],
                )
            ).rowcount  # fmt: skip
            if made == 1:
                break
        else:
            return "skipped", "too many runs of this schedule by hand at once"
        run_id = connection.execute(
            sa.select(RUNS.c.id).where(RUNS.c.schedule == schedule.name, RUNS.c.due_at == due)
        ).scalar_one()
    return run(schedule, run_id, due, secret)


def start_run(schedule, run_id, due, secret, app):
    """Run it in a thread of its own, in the app's context: a long run holds back no other schedule,
    and the clock keeps being looked at (the next due time finds it going and is skipped)."""

    def body():
        with app.app_context():
            run(schedule, run_id, due, secret)

    thread = threading.Thread(target=body, name=f"schedule {schedule.name}", daemon=True)
    thread.start()
    return thread


def history(schedule=None, limit=50, before=None, status=None):
    """The newest runs (of `schedule`, in `status`), newest first."""
    query = sa.select(RUNS).order_by(RUNS.c.id.desc()).limit(limit)
    if schedule is not None:
        query = query.where(RUNS.c.schedule == schedule)
    if before is not None:
        query = query.where(RUNS.c.id < before)
    if status is not None:
        query = query.where(RUNS.c.status == status)
    with db.engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        {
            "id": row.id,
            "schedule": row.schedule,
            "scheduled_at": _iso(row.due_at),
            "by_hand": row.due_at < 0,
            "status": row.status,
            "started_at": outbox._iso(row.started_at),
            "ended_at": outbox._iso(row.ended_at),
            "error": row.error,
        }
        for row in rows
    ]


def trim(keep_seconds, now):
    try:
        with db.engine.begin() as connection:
            connection.execute(
                sa.delete(RUNS).where(RUNS.c.started_at < now - keep_seconds, RUNS.c.status != "running")
            )
    except DBAPIError as exc:
        log.warning("schedules: trimming the history failed, trying again later: %s", outbox._first(exc))
