"""One archive: a zip file of the database's snapshot, the objects' bytes and manifest.json, which
names the format and its version, the migration, the time, the database's kind, and every other
member's size and sha256. The database is compressed; the objects are stored as they are (most are
images or archives already, and deflating them would cost the server's CPU for nothing).

An archive is checked whole before anything is restored from it (`verified`): every member the
manifest names is there, nothing else is, and each has its size and sha256. A truncated, damaged or
foreign file is refused with a message that says so."""

import datetime
import functools
import hashlib
import json
import os
import re
import secrets
import sqlite3
import zipfile
import zlib
from dataclasses import dataclass

import pymysql
import sqlalchemy as sa

FORMAT = "minibase-backup"
VERSION = 1
MANIFEST = "manifest.json"
CHUNK = 1024 * 1024
NAME = re.compile(r"minibase-(\d{8}T\d{6}Z)-[0-9a-f]{6}\.zip")
DATABASE_MEMBERS = {"sqlite": "database.sqlite3", "mysql": "database.jsonl"}
# Storage keys are minibase's own random hex names (storage.files.new_key): nothing else is a member.
# What zipfile raises for a file cut short or with flipped bits (a CRC, a deflate stream, a header).
UNREADABLE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, KeyError)
KEY_MEMBER = re.compile(r"(objects|uploads)/([0-9a-f]{8,64})")


class BackupError(Exception):
    """What a backup or a restore cannot do (a damaged archive, a target that is not empty, a place
    that does not answer), said for the operator."""


def said(work):
    """`work` with the database's, the disk's and S3's own errors turned into a BackupError that says
    which failed (the error's class and number, never a database's text, which can quote rows)."""

    @functools.wraps(work)
    def wrapped(*args, **kwargs):
        try:
            return work(*args, **kwargs)
        except (sqlite3.Error, pymysql.err.Error, sa.exc.DBAPIError) as exc:
            original = getattr(exc, "orig", None) or exc
            number = original.args[0] if original.args and isinstance(original.args[0], int) else ""
            raise BackupError(
                f"the database failed ({type(original).__name__} {number})".replace(" )", ")")
            ) from None
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise BackupError(f"{exc.strerror or type(exc).__name__}{where}") from None

    return wrapped


def new_name(now):
    return f"minibase-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}.zip"


def made_at(name):
    """The UTC time an archive's name says it was made, or None for a name that is not an archive's."""
    match = NAME.fullmatch(name)
    if match is None:
        return None
    return datetime.datetime.strptime(match[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)


class Writer:
    """An archive being written at `path`: `add` each member from a local file, then `finish`."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", allowZip64=True)
        self.files = {}

    def add(self, name, source, size, compress=False):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.file_size = size
        digest, written = hashlib.sha256(), 0
        with open(source, "rb") as file, self.zip.open(info, "w", force_zip64=size > 2**31) as out:
            while chunk := file.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                written += len(chunk)
        if written != size:
            raise RuntimeError(f"{name}: {written} bytes read where {size} were expected")
        self.files[name] = {"size": written, "sha256": digest.hexdigest()}

    def finish(self, manifest):
        """Write manifest.json (`manifest` and the members' sizes and checksums) and close."""
        whole = {"format": FORMAT, "version": VERSION, **manifest, "files": self.files}
        self.zip.writestr(MANIFEST, json.dumps(whole, indent=1, sort_keys=True), zipfile.ZIP_DEFLATED)
        self.zip.close()
        return whole

    def abandon(self):
        self.zip.close()


@dataclass
class Archive:
    """A verified archive, open: its manifest, and its members to read."""

    zip: zipfile.ZipFile
    manifest: dict

    @property
    def database(self):
        return self.manifest["database"]

    @property
    def migration(self):
        return self.manifest["migration"]

    def keys(self):
        """(area, key) of every object's bytes the archive holds: area objects/ or uploads/."""
        return [
            KEY_MEMBER.fullmatch(name).groups() for name in self.manifest["files"] if name != self.db_member
        ]

    @property
    def db_member(self):
        return DATABASE_MEMBERS[self.database]

    def extract(self, name, path):
        """Member `name` written to the local file `path`, flushed to the disk."""
        with self.zip.open(name) as member, open(path, "wb") as file:
            while chunk := member.read(CHUNK):
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())

    def close(self):
        self.zip.close()


def verified(path):
    """The archive at `path`, every member checked against its manifest; BackupError otherwise."""
    try:
        archive = zipfile.ZipFile(path)
    except UNREADABLE as exc:
        raise BackupError(f"{path} is not a whole minibase archive (truncated or damaged?): {exc}") from None
    try:
        manifest = _manifest(archive, path)
        for name, expected in manifest["files"].items():
            size, digest = _checksum(archive, name, path)
            if size != expected["size"] or digest != expected["sha256"]:
                raise BackupError(f"{path}: {name} does not match its checksum: the archive is damaged")
    except BaseException:
        archive.close()
        raise
    return Archive(archive, manifest)


def _manifest(archive, path):
    names = archive.namelist()
    if MANIFEST not in names:
        raise BackupError(f"{path} holds no {MANIFEST}: it is not a minibase archive")
    try:
        manifest = json.loads(archive.read(MANIFEST))
    except UNREADABLE as exc:
        raise BackupError(f"{path}: its {MANIFEST} cannot be read (damaged?): {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is not a minibase archive")
    if manifest.get("version") != VERSION:
        raise BackupError(
            f"{path} is an archive of format {manifest.get('version')}; this minibase reads {VERSION}"
        )
    files = manifest.get("files")
    database = manifest.get("database")
    well_formed = (
        database in DATABASE_MEMBERS
        and isinstance(manifest.get("migration"), str)
        and isinstance(files, dict)
        and DATABASE_MEMBERS[database] in files
        and all(
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and isinstance(entry.get("sha256"), str)
            and (name == DATABASE_MEMBERS[database] or KEY_MEMBER.fullmatch(name))
            for name, entry in files.items()
        )
    )
    if not well_formed:
        raise BackupError(f"{path}: its {MANIFEST} is not one minibase writes")
    if len(names) != len(set(names)) or set(names) != {MANIFEST, *files}:
        raise BackupError(f"{path} holds other members than its {MANIFEST} names: it is damaged or altered")
    return manifest


def _checksum(archive, name, path):
    digest, size = hashlib.sha256(), 0
    try:
        with archive.open(name) as member:
            while chunk := member.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except UNREADABLE as exc:
        raise BackupError(f"{path}: {name} cannot be read (truncated or damaged?): {exc}") from None
    return size, digest.hexdigest()
