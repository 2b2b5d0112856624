"""Where archives are kept: a folder, or an S3 bucket and prefix (`s3://BUCKET/PREFIX`, reached with
the S3_* settings' endpoint and keys). Only names an archive has (archive.NAME) are listed, fetched
or deleted there: nothing else in the folder or bucket is ever touched."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from backups.archive import NAME, BackupError, made_at
from config import ROOT, setting

S3_SCHEME = "s3://"


@dataclass(frozen=True)
class Listed:
    name: str
    size: int
    made_at: object  # datetime, UTC


def of(where):
    """The place `where` names: `s3://BUCKET/PREFIX` or a folder (relative to the project root)."""
    where = where.strip()
    if where.startswith(S3_SCHEME):
        bucket, _, prefix = where[len(S3_SCHEME) :].partition("/")
        if not bucket:
            raise BackupError(f"{where} names no bucket: s3://BUCKET/PREFIX")
        prefix = prefix.strip("/")
        return Bucket(bucket, f"{prefix}/" if prefix else "")
    path = Path(where)
    return Folder(path if path.is_absolute() else ROOT / path)


def archive_at(where):
    """(place, name) of one archive: `s3://BUCKET/PREFIX/NAME.zip`, a file's path, or the name of
    an archive in BACKUP_TO."""
    where = where.strip()
    head, _, name = where.rpartition("/")
    if where.startswith(S3_SCHEME):
        if not NAME.fullmatch(name):
            raise BackupError(f"{where} does not name an archive (minibase-…zip)")
        return of(head), name
    path = Path(where)
    if path.is_file():
        return Folder(path.parent), path.name
    if NAME.fullmatch(where):
        return of(setting("BACKUP_TO")), where
    raise BackupError(f"no archive at {where}")


def _listed(name, size):
    return Listed(name, size, made_at(name))


class Folder:
    def __init__(self, path):
        self.path = Path(path)

    def __str__(self):
        return str(self.path)

    def list(self):
        """The archives here, newest first."""
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return []
        found = [_listed(e.name, e.stat().st_size) for e in entries if NAME.fullmatch(e.name) and e.is_file()]
        return sorted(found, key=lambda listed: listed.name, reverse=True)

    def put(self, local, name):
        """The finished archive `local` kept here as `name`: it appears whole or not at all."""
        self.path.mkdir(parents=True, exist_ok=True)
        draft = self.path / f".{name}.partial"
        try:
            try:
                os.replace(local, draft)
            except OSError:  # another file system: copied
                shutil.copyfile(local, draft)
            with open(draft, "rb") as file:
                os.fsync(file.fileno())
            os.replace(draft, self.path / name)
        finally:
            draft.unlink(missing_ok=True)

    def fetch(self, name, work):
        """A local path of the archive `name` (here: the file itself)."""
        if not (self.path / name).is_file():
            raise BackupError(f"no archive {name} in {self.path}")
        return self.path / name

    def open(self, name):
        """The archive's bytes to stream (size, file); FileNotFoundError when there is none."""
        if not NAME.fullmatch(name):
            raise FileNotFoundError(name)
        file = open(self.path / name, "rb")  # noqa: SIM115 (the response closes it)
        return os.fstat(file.fileno()).st_size, file

    def delete(self, name):
        if NAME.fullmatch(name):
            (self.path / name).unlink(missing_ok=True)


class Bucket:
    def __init__(self, bucket, prefix):
        from storage import s3  # boto3 is imported only by those who use it

        self.s3 = s3
        self.client = s3.client(setting)
        self.bucket = bucket
        self.prefix = prefix

    def __str__(self):
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    def _call(self, operation, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return operation(*args, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in self.s3.MISSING:
                raise FileNotFoundError(str(self)) from None
            raise BackupError(f"{self} refused the request ({code})") from None
        except BotoCoreError as exc:
            raise BackupError(f"{self} is not answering ({type(exc).__name__})") from None

    def list(self):
        def pages():
            found = []
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
                for item in page.get("Contents", ()):
                    name = item["Key"][len(self.prefix) :]
                    if NAME.fullmatch(name):
                        found.append(_listed(name, item["Size"]))
            return found

        return sorted(self._call(pages), key=lambda listed: listed.name, reverse=True)

    def put(self, local, name):
        self._call(self.client.upload_file, str(local), self.bucket, self.prefix + name)

    def fetch(self, name, work):
        """The archive `name` downloaded into the folder `work`."""
        local = Path(work) / name
        try:
            self._call(self.client.download_file, self.bucket, self.prefix + name, str(local))
        except FileNotFoundError:
            raise BackupError(f"no archive {name} at {self}") from None
        return local

    def open(self, name):
        if not NAME.fullmatch(name):
            raise FileNotFoundError(name)
        answer = self._call(self.client.get_object, Bucket=self.bucket, Key=self.prefix + name)
        return answer["ContentLength"], answer["Body"]

    def delete(self, name):
        if NAME.fullmatch(name):
            self._call(self.client.delete_object, Bucket=self.bucket, Key=self.prefix + name)
