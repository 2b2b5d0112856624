"""Restoring an archive into this service's database and storage.

Nothing is written before the whole archive has been read and every member matched its checksum
(archive.verified). Then the objects' bytes are placed under their keys, and the database is
restored (SQLite: in one transaction; MySQL/MariaDB: the tables made, then every row in one
transaction); when the database's part fails, the bytes placed are removed again. Only into an
empty target (`contents`), unless `force`: then what the archive does not hold is removed from the
storage once the database is restored."""

import shutil
from dataclasses import dataclass, field

import sqlalchemy as sa
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from backups import archive, make, mysql, places, sqlite
from backups.archive import BackupError
from config import ROOT, setting
from extensions import db, state
from storage import files

AREAS = ("objects", "uploads")


@dataclass
class Restored:
    name: str
    migration: str
    created_at: str
    objects: int
    warnings: list = field(default_factory=list)


def stored(backend):
    """{(area, key)} of every object's bytes and resumable upload's part in the storage."""
    return {(area, key) for area in AREAS for key in make.in_area(backend, area).keys()}


def contents(backend):
    """What the target holds that a restore would replace, in words; [] when it is empty: no user,
    no row in a table that is not minibase's own (minibase_…), no stored object. minibase's own
    tables may hold what a first start writes (the migration version, tables.toml's buckets)."""
    found = []
    with db.engine.connect() as connection:
        for table in sa.inspect(connection).get_table_names():
            if table.startswith("sqlite_") or (
                table.startswith("minibase_") and table != "minibase_storage_objects"
            ):
                continue
            quoted = connection.dialect.identifier_preparer.quote(table)
            if connection.execute(sa.text(f"SELECT 1 FROM {quoted} LIMIT 1")).first() is not None:
                found.append(f"rows in {table}")
    if any(True for area in AREAS for _ in make.in_area(backend, area).keys()):
        found.append("objects in the storage")
    return found


def check_fits(verified):
    kind = make.database_kind()
    if verified.database != kind:
        raise BackupError(f"the archive holds a {verified.database} database; this service runs on {kind}")
    try:
        ScriptDirectory(str(ROOT / "migrations")).get_revision(verified.migration)
    except CommandError:
        raise BackupError(
            f"the archive's database is at migration {verified.migration!r}, which this minibase does not "
            "know: restore it with the version of minibase that made it"
        ) from None


@archive.said
def restore(where, force=False):
    """Restore the archive `where` names (places.archive_at): Restored."""
    place, name = places.archive_at(where)
    backend = files.backend()
    if not force and (found := contents(backend)):
        raise BackupError(
            f"the target is not empty ({', '.join(found)}): restore into an empty database "
            "and storage, or give --force to replace what is there"
        )
    work = make.working_folder()
    try:
        verified = archive.verified(place.fetch(name, work))
        try:
            check_fits(verified)
            before = stored(backend)
            placed = place_objects(verified, backend, before, work)
            try:
                restore_database(verified, work)
            except BaseException:
                for area, key in placed:
                    make.in_area(backend, area).delete(key)
                raise
            if force:
                for area, key in before - set(verified.keys()):
                    make.in_area(backend, area).delete(key)
            manifest = verified.manifest
        finally:
            verified.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    restored = Restored(name, manifest["migration"], manifest["created_at"], manifest["objects"])
    if manifest.get("jwt_secret_fingerprint") != make.secret_fingerprint(setting("JWT_SECRET")):
        restored.warnings.append(
            "JWT_SECRET differs from the one the archive's service had: its refresh tokens, API keys "
            "and (without MFA_ENCRYPTION_KEY) TOTP factors do not work with this one"
        )
    return restored


def place_objects(verified, backend, before, work):
    """Write the archive's bytes under their keys (a key already there holds the same bytes): the
    (area, key) placed."""
    placed = []
    try:
        for area, key in verified.keys():
            if (area, key) in before:
                continue
            local = work / f"restore-{key}"
            verified.extract(f"{area}/{key}", local)
            received = files.Received(str(local), local.stat().st_size, "")
            try:
                make.in_area(backend, area).place(received, key)
            finally:
                received.discard()
            placed.append((area, key))
    except BaseException:
        for area, key in placed:
            make.in_area(backend, area).delete(key)
        raise
    return placed


def restore_database(verified, work):
    local = work / verified.db_member
    verified.extract(verified.db_member, local)
    # The pooled connections are closed: SQLite's file is replaced under them, MySQL's tables dropped.
    db.session.remove()
    db.engine.dispose()
    if state().reads is not None:
        state().reads.dispose()
    if verified.database == "sqlite":
        sqlite.restore(local, db.engine.url.database)
    else:
        mysql.restore(local, db.engine.url)
