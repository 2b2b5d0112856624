"""Making archives, listing them and pruning the oldest.

The archive's moment is the database snapshot's: one read transaction (SQLite's backup API; on
MySQL/MariaDB one consistent-snapshot transaction). The objects it holds are exactly those the
snapshot's rows name, read by their storage keys. A key's bytes never change (each upload writes a
new key, storage.files), so a key the snapshot names holds the bytes its row describes, unless an
overwrite or a delete committed after the snapshot has removed them since. The bytes are secured
first (on a disk, a hard link into a working folder: instant, and the bytes stay there whatever is
deleted after); when some were removed before they were secured, a new snapshot is taken and only
the keys not yet secured are fetched, until one snapshot has all of its bytes (ATTEMPTS at most).
So a restored copy has no object row without its bytes and no bytes without their row."""

import datetime
import hashlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from backups import archive, mysql, places, sqlite
from backups.archive import BackupError
from config import setting
from errors import APIError
from extensions import db
from storage import files

log = logging.getLogger("minibase")
ATTEMPTS = 10
HOLD_AFTER = 2  # snapshots taken without holding uploads back (MySQL), before the ones that do
STALE = 24 * 3600  # seconds after which a working folder is a killed backup's


@dataclass(frozen=True)
class Made:
    name: str
    place: str
    size: int
    objects: int
    attempts: int
    manifest: dict


def database_kind():
    return "sqlite" if db.engine.dialect.name == "sqlite" else "mysql"


def secret_fingerprint(secret):
    """A short digest of JWT_SECRET: a restore can tell the operator the secret differs, and the
    archive does not carry the secret."""
    return hashlib.sha256(f"minibase-backup:{secret}".encode()).hexdigest()[:16]


def in_area(backend, area):
    """The storage backend's `area`: objects/ (the objects' bytes) or uploads/ (resumable uploads' parts)."""
    return backend if area == "objects" else backend.beside(area)


def working_folder():
    """A new folder beside the objects (STORAGE_ROOT/.tmp): the same file system, so that a disk's
    bytes are secured by hard links. Those a killed backup left, a day old, go."""
    staging = files.staging_directory()
    staging.mkdir(parents=True, exist_ok=True)
    for left in staging.glob("backup-*"):
        try:
            if left.is_dir() and time.time() - left.stat().st_mtime > STALE:
                shutil.rmtree(left, ignore_errors=True)
        except FileNotFoundError:  # another backup's, removed meanwhile
            pass
    return Path(tempfile.mkdtemp(prefix="backup-", dir=staging))


def snapshot(kind, into, secure, hold=False):
    """A snapshot of the database written to `into`, its keys' bytes fetched by `secure(keys)`
    right after the keys are read: (migration, {(area, key): size or None}), or None when some of
    those bytes were gone. With `hold` (MySQL), uploads that would replace a stored object wait
    until its bytes are secured."""
    if kind == "sqlite":
        path = db.engine.url.database
        if not path or path == ":memory:":
            raise BackupError("an in-memory SQLite database cannot be backed up")
        return sqlite.snapshot(path, into, secure)
    return mysql.snapshot(db.engine.url, into, secure, hold)


def secure(backend, keys, held, work):
    """Fetch the bytes of each key in `keys` not in `held` (area, key) -> local path into `work`:
    the keys whose bytes are gone. The keys come newest first, those likeliest to be replaced."""
    gone = []
    for (area, key), size in keys.items():
        if (area, key) in held:
            continue
        if not archive.KEY_MEMBER.fullmatch(f"{area}/{key}"):
            raise BackupError(f"a row names the storage key {key!r}, which minibase never makes")
        local = work / area / key
        local.parent.mkdir(exist_ok=True)
        try:
            in_area(backend, area).fetch(key, local)
        except FileNotFoundError:
            gone.append((area, key))
            continue
        if size is not None and local.stat().st_size != size:
            raise BackupError(
                f"the storage holds {local.stat().st_size} bytes under {key} where its row says {size}: "
                "the storage is damaged"
            )
        held[area, key] = local
    return gone


@archive.said
def create(where=None):
    """Write one archive to `where` (a folder or s3://BUCKET/PREFIX; BACKUP_TO by default): Made."""
    place = places.of(where or setting("BACKUP_TO"))
    kind = database_kind()
    backend = files.backend()
    work = working_folder()
    try:
        held = {}
        for attempt in range(1, ATTEMPTS + 1):
            taken = work / f"database-{attempt}"
            moment = datetime.datetime.now(datetime.UTC)
            # After HOLD_AFTER snapshots lost to replaced objects, uploads wait while bytes are secured
            hold = attempt > HOLD_AFTER
            found = snapshot(kind, taken, lambda keys: secure(backend, keys, held, work), hold)
            if found is not None:
                migration, keys = found
                break
            log.info("backup: objects were replaced since the snapshot; taking another")
            taken.unlink(missing_ok=True)
        else:
            raise BackupError(
                f"the storage kept changing: in each of {ATTEMPTS} snapshots, objects were replaced "
                "before their bytes could be read; try again when it is quieter"
            )
        name = archive.new_name(moment)
        writer = archive.Writer(work / name)
        try:
            writer.add(archive.DATABASE_MEMBERS[kind], taken, taken.stat().st_size, compress=True)
            for area, key in sorted(keys):
                local = held[area, key]
                writer.add(f"{area}/{key}", local, local.stat().st_size)
        except BaseException:
            writer.abandon()
            raise
        manifest = writer.finish(
            {
                "created_at": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "migration": migration,
                "database": kind,
                "storage_backend": setting("STORAGE_BACKEND"),
                "objects": sum(1 for area, _ in keys if area == "objects"),
                "jwt_secret_fingerprint": secret_fingerprint(setting("JWT_SECRET")),
            }
        )
        size = (work / name).stat().st_size
        place.put(work / name, name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Made(name, str(place), size, manifest["objects"], attempt, manifest)


def scheduled():
    """A run of BACKUP_SCHEDULE: an archive to BACKUP_TO, then the oldest past BACKUP_KEEP removed.
    A failure raises, and the schedule records the run failed with what went wrong."""
    try:
        made = create()
        prune()
    except APIError as exc:  # the storage's 503: its message, not its status
        raise BackupError(exc.message) from None
    log.info("backup: %s made at %s (%d bytes, %d objects)", made.name, made.place, made.size, made.objects)


def listing(where=None):
    """The archives at `where` (BACKUP_TO by default), newest first."""
    return places.of(where or setting("BACKUP_TO")).list()


def prune(where=None, keep=None):
    """Delete the archives at `where` past the newest `keep` (BACKUP_KEEP; 0 keeps all): their names."""
    keep = setting("BACKUP_KEEP") if keep is None else keep
    if not keep:
        return []
    place = places.of(where or setting("BACKUP_TO"))
    old = place.list()[keep:]
    for listed in old:
        place.delete(listed.name)
    return [listed.name for listed in old]
