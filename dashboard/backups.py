"""The Backups page's work: the archives at BACKUP_TO, and one made on a thread of its own (a large
storage takes longer than a request should wait), at most one at a time in this process; the page
shows the one being made, or how the last one ended. Each is in the audit log."""

import contextvars
import datetime
import logging
import threading
from dataclasses import dataclass

from auth import audit
from backups import make, places
from backups.archive import NAME, BackupError
from config import setting
from database import transactions
from errors import APIError
from extensions import db, state

log = logging.getLogger("minibase")
_starting = threading.Lock()


@dataclass
class Run:
    started_at: datetime.datetime
    finished_at: datetime.datetime | None = None
    name: str | None = None
    error: str | None = None


def archives():
    """(the archives at BACKUP_TO, newest first; what went wrong reading them, or None)."""
    try:
        return make.listing(), None
    except (BackupError, APIError) as exc:
        return [], _said(exc)


def _said(exc):
    return exc.message if isinstance(exc, APIError) else str(exc)


def current():
    """The backup being made, or the last one made from the dashboard in this process, or None."""
    return state().backup_run


def start(in_app):
    """Begin a backup on a thread that runs in `in_app()` (the app's context); False when one is
    being made already."""
    cache = state()
    with _starting:
        if cache.backup_run is not None and cache.backup_run.finished_at is None:
            return False
        run = cache.backup_run = Run(datetime.datetime.now(datetime.UTC))
    # The thread keeps the request's audit context: the entry names the administrator and their IP.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(_make, in_app, run), name="backup", daemon=True).start()
    return True


def _make(in_app, run):
    with in_app():
        try:
            made = make.create()
            make.prune()
            run.name = made.name
            transactions.write(
                audit.record, "backup_created", made.name, {"size": made.size, "objects": made.objects}
            )
        except Exception as exc:
            if isinstance(exc, BackupError | APIError):
                run.error = _said(exc)
            else:
                log.exception("the backup failed")
                run.error = "the backup failed: the log says why"
            try:
                transactions.write(audit.record, "backup_failed", None, {"error": run.error})
            except Exception:  # the database is what failed: the log has it already
                log.exception("the backup's failure could not be recorded")
        finally:
            run.finished_at = datetime.datetime.now(datetime.UTC)
            db.session.remove()


def download(name):
    """(size, stream) of the archive `name` at BACKUP_TO; FileNotFoundError for any other name."""
    if not NAME.fullmatch(name):
        raise FileNotFoundError(name)
    return places.of(setting("BACKUP_TO")).open(name)
