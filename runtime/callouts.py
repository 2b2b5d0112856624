"""Commands for webhooks, schedules and the capture triggers: `flask --app app schedules run NAME`,
`schedules list`, `webhooks resend ID`, `background` and `realtime prune`."""

import signal
import threading

import click
from flask import current_app
from flask.cli import with_appcontext

from live import capture
from webhooks import outbox, schedules, worker


def _state():
    return current_app.extensions["minibase"]


@click.group("schedules")
def schedules_group():
    """The schedules of tables.toml ([schedules.NAME])."""


@schedules_group.command("run")
@click.argument("name")
@with_appcontext
def run_schedule(name):
    """Run the schedule NAME now, once, recorded as its due runs are."""
    schedule = schedules.planned(_state()).get(name)
    if schedule is None:
        raise click.ClickException(f"no schedule named {name!r} in tables.toml")
    secret = schedule.target.secret or current_app.config.get("WEBHOOK_SECRET")
    status, error = schedules.run_now(schedule, secret)
    click.echo(f"{name}: {status}" + (f": {error}" if error else ""))
    if status != "succeeded":
        raise SystemExit(1)


@schedules_group.command("list")
@with_appcontext
def list_schedules():
    """Each schedule, its cron line, and its last runs."""
    for name, schedule in sorted(schedules.planned(_state()).items()):
        click.echo(f"{name}  {schedule.cron}")
        for run in schedules.history(name, limit=5):
            click.echo(f"  {run['scheduled_at']}  {run['status']}  {run['error'] or ''}".rstrip())


@click.group("webhooks")
def webhooks_group():
    """The database webhooks of tables.toml ([webhooks.NAME])."""


@webhooks_group.command("resend")
@click.argument("delivery_id", type=int)
@with_appcontext
def resend(delivery_id):
    """Send the failed delivery DELIVERY_ID once more (by a serving instance, at once)."""
    import time

    if not outbox.resend(delivery_id, time.time()):
        raise click.ClickException(f"delivery {delivery_id} is not a failed delivery")
    click.echo(f"delivery {delivery_id} is queued again")


@click.command("background")
@with_appcontext
def background():
    """Send webhooks and run schedules until SIGTERM or Ctrl-C, serving nothing: for a host whose
    web server runs minibase per request (CGI, Passenger), where no process stays up to do it."""
    app = current_app._get_current_object()
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    running = worker.Background(app).start()
    hooks, planned = _state().tables_toml.webhooks, schedules.planned(_state())
    click.echo(f"sending {len(hooks)} webhook(s), running {len(planned)} schedule(s)")
    stopping.wait()
    running.stop()


@click.group("realtime")
def realtime_group():
    """The change capture's triggers."""


@realtime_group.command("prune")
@with_appcontext
def prune():
    """Drop the capture triggers of tables this tables.toml no longer opts in (Realtime or webhooks).
    Run it once every instance serves the new file: a start never drops a trigger."""
    tables = {hook.table for hook in _state().tables_toml.webhooks.values()}
    dropped = capture.prune(tables)
    for name in dropped:
        click.echo(f"dropped {name}")
    click.echo(f"{len(dropped)} trigger(s) dropped")


def register(app):
    for command in (schedules_group, webhooks_group, realtime_group, background):
        app.cli.add_command(command)
