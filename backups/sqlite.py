"""A SQLite database into an archive and back, through SQLite's online backup API: the copy is the
whole file (tables, indexes, triggers, the users table and every other app's) as one read
transaction saw it, while writers go on (WAL); a restore writes the target whole in one write
transaction, so it has all of the archive's database or none of it."""

import json
import sqlite3

from backups.archive import BackupError

TIMEOUT = 30  # seconds a restore waits for another connection's write lock


def snapshot(database, into, secure):
    """Copy the database file `database` into the new file `into`: (migration, {(area, key): size or
    None} of the storage keys its rows name), once `secure(keys)` has fetched their bytes; None when
    it reports some gone (replaced since the copy)."""
    source = sqlite3.connect(database, timeout=TIMEOUT)
    target = sqlite3.connect(into)
    try:
        source.backup(target)  # every page in one step: one read transaction, one moment
    finally:
        source.close()
    try:
        keys = stored_keys(target)
        return None if secure(keys) else (migration(target), keys)
    finally:
        target.close()


def migration(connection):
    try:
        row = connection.execute("SELECT version_num FROM minibase_alembic_version").fetchone()
    except sqlite3.OperationalError:  # never migrated
        return ""
    return row[0] if row else ""


def stored_keys(connection):
    """{(area, key): size or None} of every object's bytes and every resumable upload's part the
    database's rows name."""
    keys = {}
    try:
        for key, size in connection.execute(
            "SELECT storage_key, size FROM minibase_storage_objects ORDER BY updated_at DESC"
        ):
            keys["objects", key] = size
        for (parts,) in connection.execute("SELECT parts FROM minibase_storage_uploads"):
            keys.update((("uploads", part), None) for part in json.loads(parts or "[]"))
    except sqlite3.OperationalError:  # no storage tables: never migrated
        return {}
    return keys


def restore(file, database):
    """Replace the database file `database` with the archive's `file`, whole, in one transaction."""
    source = sqlite3.connect(file)
    target = sqlite3.connect(database, timeout=TIMEOUT)
    try:
        check = source.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise BackupError(f"the archive's database is damaged: {check}")
        source.backup(target)
    finally:
        source.close()
        target.close()
