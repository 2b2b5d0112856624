"""The dashboard's Backups page: the archives at BACKUP_TO, a button that makes one (on a thread:
the page follows it), and each archive's download, recorded in the audit log."""

from flask import current_app, request
from werkzeug.wsgi import wrap_file

from auth import audit
from blueprints.dashboard.base import bp, done, page
from dashboard import backups
from database import transactions


@bp.get("/backups")
def backups_page():
    run = backups.current()
    return page("backups.html", archives=backups.archives(), run=run, where=current_app.config["BACKUP_TO"])


@bp.post("/backups")
def make_backup():
    started = backups.start(current_app._get_current_object().app_context)
    return done(".backups_page", "backup-started" if started else "backup-running")


@bp.get("/backups/<path:name>")
def download_backup(name):
    try:
        size, stream = backups.download(name)
    except FileNotFoundError:
        return page("error.html", 404, message="There is no such archive.")
    transactions.write(audit.record, "backup_downloaded", name)
    headers = {
        "Content-Type": "application/zip",
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{name}"',
    }
    return current_app.response_class(
        wrap_file(request.environ, stream), headers=headers, direct_passthrough=True
    )
