"""Command-line administration: `flask --app app keys | create-user | deactivate-user | revoke-sessions |
admin grant|revoke | expire-uploads | purge-anonymous | backup create|list|restore | functions new|call`."""

import json
import secrets
from datetime import timedelta

import click
from flask import current_app
from flask.cli import with_appcontext

import variables
from auth import accounts, administration, anonymous, audit, sessions, signing_keys, signups, tokens
from backups import make, restore
from backups.archive import BackupError
from database import transactions
from errors import APIError
from models.auth import Session
from runner import scaffold, service
from storage import resumable


def _from_command_line():
    """The audit log's actor for what a command does."""
    audit.begin("local", audit.CLI)
    audit.acting("cli")


def _user_id(email):
    found = accounts.find_credentials(email.strip().lower())
    if found is None:
        raise click.ClickException(f"no user with email {email}")
    return found.user_id


@click.group("keys", invoke_without_command=True)
@click.pass_context
def keys(context):
    """Print the anon and service_role API keys; `keys generate-signing-key` makes a signing key."""
    if context.invoked_subcommand is None:
        context.invoke(print_keys)


@with_appcontext
def print_keys():
    secret = current_app.config["JWT_SECRET"]
    click.echo(f"anon key:         {tokens.api_key('anon', secret)}")
    click.echo(f"service_role key: {tokens.api_key('service_role', secret)}")


@keys.command("generate-signing-key")
@click.option("--alg", "algorithm", type=click.Choice(["ES256", "RS256"]), default="ES256", show_default=True)
@click.option("--standby", is_flag=True, help='key_ops ["verify"]: published and trusted, not yet signing.')
def generate_signing_key(algorithm, standby):
    """Print a new private JWK for JWT_SIGNING_KEYS (one line of JSON: keep it secret)."""
    key = signing_keys.generate(algorithm)
    if standby:
        key["key_ops"] = ["verify"]
    click.echo(json.dumps(key))


@keys.command("generate-api-key")
@click.option(
    "--secret", is_flag=True, help="an sb_secret_ key (service_role) instead of sb_publishable_ (anon)"
)
def generate_api_key(secret):
    """Print a new key for PUBLISHABLE_KEYS (or, with --secret, SECRET_KEYS)."""
    prefix = variables.API_KEY_PREFIXES["SECRET_KEYS" if secret else "PUBLISHABLE_KEYS"]
    click.echo(prefix + secrets.token_urlsafe(24))


@click.command("create-user")
@with_appcontext
@click.argument("email")
@click.password_option()
@click.option("--username")
@click.option("--first-name")
@click.option("--last-name")
def create_user(email, password, username, first_name, last_name):
    """Create an active user."""
    data = {"username": username, "first_name": first_name, "last_name": last_name}
    try:
        user_id = transactions.write(signups.create_user, email.strip().lower(), password, data)
    except APIError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"created user {user_id}")


@click.command("deactivate-user")
@with_appcontext
@click.argument("email")
def deactivate_user(email):
    """Set active=0 and end the user's sessions."""
    _from_command_line()
    transactions.write(accounts.set_active, _user_id(email), False)
    click.echo(f"deactivated {email}")


@click.command("revoke-sessions")
@with_appcontext
@click.argument("email")
def revoke_sessions(email):
    """End every session of a user: their tokens stop working at once."""
    transactions.write(sessions.end, Session.user_id == _user_id(email))
    click.echo(f"revoked the sessions of {email}")


@click.group("admin")
def admin():
    """Who may sign in to the dashboard (/dashboard): app_metadata.role = "admin"."""
    _from_command_line()


@admin.command("grant")
@with_appcontext
@click.argument("email")
def grant(email):
    """Make a user an administrator of the dashboard."""
    administration.admin_update_user(_user_id(email), {"app_metadata": {"role": "admin"}})
    click.echo(f"{email} is an administrator")


@admin.command("revoke")
@with_appcontext
@click.argument("email")
def revoke(email):
    """Take the dashboard away from a user (their open dashboard sessions stop at their next request)."""
    administration.admin_update_user(_user_id(email), {"app_metadata": {"role": None}})
    click.echo(f"{email} is no longer an administrator")


@click.command("expire-uploads")
@with_appcontext
def expire_uploads():
    """Delete the resumable uploads left untouched past their expiry, with their chunks (each upload
    begun deletes some too; this is for a cron job on a service where none may begin)."""
    removed = 0
    while batch := resumable.expire_abandoned():
        removed += batch
    click.echo(f"removed {removed} expired uploads")


@click.command("purge-anonymous")
@click.option("--days", type=click.IntRange(min=1), default=30, show_default=True)
@with_appcontext
def purge_anonymous(days):
    """Delete the anonymous users neither created nor signed in for DAYS days (a cron job's)."""
    _from_command_line()
    deleted, kept = anonymous.purge(timedelta(days=days))
    click.echo(f"deleted {deleted} anonymous users" + (f"; kept {kept} still referred to" if kept else ""))


@click.group("backup")
def backup():
    """Archives of the database and the storage's objects (docs/operations.md, Backups)."""


@backup.command("create")
@click.option("--to", "where", help="A folder or s3://BUCKET/PREFIX (default: BACKUP_TO).")
@with_appcontext
def backup_create(where):
    """Write one archive of this moment, then remove the oldest past BACKUP_KEEP there."""
    try:
        made = make.create(where)
        pruned = make.prune(where)
    except (BackupError, APIError) as exc:
        raise click.ClickException(_said(exc)) from None
    click.echo(f"{made.place.rstrip('/')}/{made.name}: {made.size} bytes, {made.objects} objects")
    for name in pruned:
        click.echo(f"removed {name} (BACKUP_KEEP)")


@backup.command("list")
@click.option("--at", "where", help="A folder or s3://BUCKET/PREFIX (default: BACKUP_TO).")
@with_appcontext
def backup_list(where):
    """The archives there, newest first: name, size, time."""
    try:
        found = make.listing(where)
    except (BackupError, APIError) as exc:
        raise click.ClickException(_said(exc)) from None
    for listed in found:
        click.echo(f"{listed.name}  {listed.size:>12}  {listed.made_at:%Y-%m-%d %H:%M:%S} UTC")


@backup.command("restore")
@click.argument("archive")
@click.option("--force", is_flag=True, help="Replace what the database and storage hold.")
@with_appcontext
def backup_restore(archive, force):
    """Restore ARCHIVE (a file, s3://BUCKET/PREFIX/NAME.zip, or a name in BACKUP_TO) into an empty
    database and storage. Stop the service first."""
    try:
        restored = restore.restore(archive, force)
    except (BackupError, APIError) as exc:
        raise click.ClickException(_said(exc)) from None
    for warning in restored.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(
        f"restored {restored.name}: the database at migration {restored.migration} as of "
        f"{restored.created_at}, {restored.objects} objects"
    )


def _said(exc):
    return exc.message if isinstance(exc, APIError) else str(exc)


@click.group("functions")
def functions():
    """Functions in FUNCTIONS_DIR (docs/functions.md)."""


@functions.command("new")
@click.argument("name")
@with_appcontext
def new_function(name):
    """Write FUNCTIONS_DIR/NAME.py, a function that answers at /functions/v1/NAME."""
    try:
        path = scaffold.write(current_app.config["FUNCTIONS_DIR"], name)
    except scaffold.Refused as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {path}")
    click.echo(f"call it (make run serves it at once): curl -X POST http://{current_app.config['HOST']}:"
               f"{current_app.config['PORT']}/functions/v1/{name} -H 'apikey: <anon key>' "
               "-H 'Authorization: Bearer <anon key>' -d '{\"name\": \"you\"}' "
               "-H 'Content-Type: application/json'")  # fmt: skip


@functions.command("call")
@click.argument("name")
@click.option("--body", default=None, help="a JSON body to send")
@with_appcontext
def call_function(name, body):
    """Call function NAME as the service and print its status, body and log lines."""
    if current_app.extensions["minibase"].function_runner is None:
        raise click.ClickException("FUNCTIONS is off")
    try:
        sent = None if body is None else json.loads(body)
    except ValueError as exc:
        raise click.ClickException(f"--body is not JSON: {exc}") from None
    status, answer = service.invoke(name, sent)
    click.echo(f"status {status}")
    click.echo(answer.decode("utf-8", "replace"))
    for line in service.functions().journal.recent(name)[0]["lines"]:
        click.echo(f"| {line}")


def register(app):
    from runtime import callouts

    app.cli.add_command(functions)
    commands = (keys, create_user, deactivate_user, revoke_sessions, admin, expire_uploads, backup)
    for command in (*commands, purge_anonymous):
        app.cli.add_command(command)
    callouts.register(app)
