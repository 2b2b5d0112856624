"""The dashboard's Backups page: the archives at BACKUP_TO, a button that makes one (on a thread:
the page follows it), and each archive's download, recorded in the audit log."""

from flask import current_app, request
from werkzeug.wsgi import wrap_file

from auth import audit
from backups.archive import BackupError
from blueprints.dashboard.base import bp, done, page
from dashboard import backups
from database import transactions


@bp.get("/backups")
def backups_page():
    archives, error = backups.archives()
    config = current_app.config
    return page(
        "backups.html", archives=archives, error=error, run=backups.current(),
        where=config["BACKUP_TO"], schedule=config["BACKUP_SCHEDULE"], keep=config["BACKUP_KEEP"],
    )  # fmt: skip


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
    except BackupError as exc:  # an S3 place that does not answer
        return page("error.html", 503, message=str(exc))
    transactions.write(audit.record, "backup_downloaded", name)
    headers = {
        "Content-Type": "application/zip",
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{name}"',
    }
    return current_app.response_class(
        wrap_file(request.environ, stream), headers=headers, direct_passthrough=True
    )
