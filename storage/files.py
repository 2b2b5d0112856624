"""Where objects' bytes live: a directory (STORAGE_ROOT) or an S3-compatible bucket. Every object is
stored under a key minibase makes (a random hex name), never under a client's path. A body is first
received into a temporary file (streamed, counted, hashed), then placed under its key while the
transaction that records it is open; the key is unknown to every row until that transaction commits."""

import hashlib
import io
import logging
import os
import queue
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import metrics
from config import setting
from errors import Storage, object_too_large, storage_error
from extensions import state

CHUNK = 256 * 1024
QUEUED = 4  # chunks an upload may hold in memory waiting for its md5 (Md5)
INLINE = 8  # chunks (2 MB) of a body hashed without a thread (Md5)
SPOOL_MEMORY = 512 * 1024  # a body a Spool keeps in memory; past this, in its file
# The WSGI environ's key of the Spool a server received a request's body into (runtime/asgi.py):
# the upload takes that file as it is, with its md5 (blueprints/request.py).
SPOOLED = "minibase.spooled_body"

log = logging.getLogger("minibase")


@dataclass
class Received:
    """A body received into a temporary file: its path, size and md5."""

    path: str
    size: int
    md5: str

    def discard(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def new_key():
    return secrets.token_hex(16)


class Md5:
    """The md5 of the chunks given to `update`, in order: the first INLINE chunks hashed where they
    are, the rest on a thread of its own while the caller copies the next ones and flushes the file:
    hashlib lets go of the GIL, and md5 runs at about a disk's speed (635 MB/s here, where a file is
    written and fsynced at 270-620 MB/s), so one after the other they took twice as long as either.
    A thread costs more than it saves on a body of a few chunks. At most QUEUED chunks wait for it."""

    def __init__(self):
        self.digest = hashlib.md5(usedforsecurity=False)
        self.hashed = 0  # chunks hashed in place
        self.chunks = None
        self.thread = None
        self.failed = None

    def update(self, chunk):
        if self.thread is None:
            if self.hashed < INLINE:
                self.digest.update(chunk)
                self.hashed += 1
                return
            self.chunks = queue.Queue(QUEUED)
            self.thread = threading.Thread(target=self._hash, name="md5", daemon=True)
            self.thread.start()
        self.chunks.put(chunk)

    def _hash(self):
        while (chunk := self.chunks.get()) is not None:
            if self.failed is None:  # after a failure, only take the chunks so that no put waits
                try:
                    self.digest.update(chunk)
                except BaseException as exc:
                    self.failed = exc

    def hexdigest(self):
        self.stop()
        if self.failed is not None:
            raise self.failed
        return self.digest.hexdigest()

    def stop(self):
        """Let the thread finish what is queued and end; again, nothing more happens."""
        if self.thread is not None:
            self.chunks.put(None)
            self.thread.join()
            self.thread = None


def receive(stream, limit, directory):
    """Copy `stream` into a new temporary file in `directory`, chunk by chunk, with its md5 (Md5);
    a 413 past `limit` bytes, a 400 when the client's body cannot be read (it hung up or stalled
    halfway), a 503 when the disk cannot take it, and no file left behind when anything goes wrong.
    A Spool, the whole body the server received into `directory` with its md5, is taken as it is,
    without a copy. Its bytes count in metrics.STORAGE_BYTES_IN."""
    received = _receive(stream, limit, directory)
    metrics.STORAGE_BYTES_IN.inc(received.size)
    return received


def _receive(stream, limit, directory):
    if isinstance(stream, Spool):
        return stream.take(limit, directory)
    fd, path = _temporary(directory)
    digest, size = Md5(), 0
    try:
        with os.fdopen(fd, "wb") as file:
            while True:
                chunk = _read(stream)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise object_too_large()
                digest.update(chunk)
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())  # on disk before a committed row can name it, power cuts included
        md5 = digest.hexdigest()
    except BaseException as exc:
        digest.stop()
        os.unlink(path)
        if isinstance(exc, OSError):
            raise disk_unavailable() from None  # full, read-only, gone: the client's body was fine
        raise
    return Received(path, size, md5)


def _read(stream):
    """The next chunk of the client's body. An OSError here is the client's side (a connection
    reset, a read that timed out), not the disk's: a 400, never the 503 of a disk."""
    try:
        return stream.read(CHUNK)
    except OSError:
        raise body_unreadable() from None


def body_unreadable():
    return storage_error(400, Storage.INVALID_REQUEST, "The request body could not be read to its end")


def _temporary(directory):
    try:
        os.makedirs(directory, exist_ok=True)
        return tempfile.mkstemp(dir=directory, prefix="upload-")
    except OSError:
        raise disk_unavailable() from None


class Spool:
    """A request's body as the server receives it (`write`, chunk by chunk), with its md5 computed
    as it arrives: in memory up to SPOOL_MEMORY bytes, then in a temporary file in `directory`
    (STORAGE_ROOT/.tmp, where an object's file is made). Read like a file once written (`seek(0)`),
    or taken whole by an upload (`take`): the file it is becomes the upload's, neither copied nor
    hashed again. `close` removes the file unless it was taken. A disk that fails while the body
    arrives is remembered and answered (a 503) when the body is read or taken, not in the server."""

    def __init__(self, directory, memory=SPOOL_MEMORY):
        self.directory = directory
        self.memory = memory
        self.digest = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.file = io.BytesIO()
        self.path = None  # the file's, once the body is past `memory`
        self.failed = False
        self.closed = False
        self.lock = threading.Lock()  # the server may write from a thread while the loop closes it

    def write(self, chunk):
        with self.lock:
            self.size += len(chunk)
            if self.failed or self.closed:
                return
            self.digest.update(chunk)
            try:
                if self.path is None and self.size > self.memory:
                    self._to_disk()
                self.file.write(chunk)
            except OSError:
                self.failed = True
                self._remove()

    def _to_disk(self):
        os.makedirs(self.directory, exist_ok=True)
        fd, self.path = tempfile.mkstemp(dir=self.directory, prefix="upload-")
        held, self.file = self.file, os.fdopen(fd, "w+b")
        self.file.write(held.getbuffer())

    def take(self, limit, directory):
        """The whole body as a Received file, on the disk (fsync) and the caller's to discard; a 413
        past `limit` bytes."""
        if self.failed:
            raise disk_unavailable()
        if self.size > limit:
            raise object_too_large()
        if self.path is None:  # a small body, in memory: written out once, as receive() would
            fd, path = _temporary(directory)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(self.file.getbuffer())
                    file.flush()
                    os.fsync(file.fileno())
            except OSError:
                os.unlink(path)
                raise disk_unavailable() from None
            return Received(path, self.size, self.digest.hexdigest())
        path, file = self.path, self.file
        self.path, self.file = None, io.BytesIO()  # the file is the caller's now
        try:
            with file:
                file.flush()
                os.fsync(file.fileno())  # on disk before a committed row can name it
        except OSError:
            os.unlink(path)
            raise disk_unavailable() from None
        return Received(path, self.size, self.digest.hexdigest())

    def read(self, size=-1):
        self._check()
        return self.file.read(size)

    def readinto(self, buffer):
        self._check()
        return self.file.readinto(buffer)

    def readline(self, size=-1):
        self._check()
        return self.file.readline(size)

    def seek(self, offset, whence=0):
        return 0 if self.failed else self.file.seek(offset, whence)

    def tell(self):
        return 0 if self.failed else self.file.tell()

    def readable(self):
        return True

    def _check(self):
        if self.failed:
            raise disk_unavailable()

    def close(self):
        with self.lock:
            self.closed = True
            self._remove()

    def _remove(self):
        self.file.close()
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None


def disk_unavailable():
    return storage_error(503, Storage.UNAVAILABLE, "The storage disk is not available, try again later")


class Disk:
    """Objects as files under `root`/objects/ab/abcdef…, temporary files under `root`/.tmp. `area`:
    another directory beside objects/ (uploads/: the parts of resumable uploads)."""

    def __init__(self, root, area="objects"):
        self.root = Path(root)
        self.staging = self.root / ".tmp"
        self.objects = os.path.join(root, area)  # as text: opening a download builds no Path

    def beside(self, area):
        return Disk(self.root, area)

    def path(self, key):
        return Path(self.objects) / key[:2] / key

    def place(self, received, key):
        """Put the received file under `key`, by renaming it (one change of a directory: a link and
        the temporary name's removal were two); again with the same arguments, nothing more happens
        (a transaction that is tried again places its file again)."""
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(received.path, target)
        except FileNotFoundError:
            if not target.exists():
                raise disk_unavailable() from None
        except OSError:
            raise disk_unavailable() from None

    def copy(self, key, new_key):
        target = self.path(new_key)
        draft = self.staging / f"copy-{new_key}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self.staging.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.path(key), draft)
            os.replace(draft, target)
        except FileNotFoundError:
            raise
        except OSError:
            draft.unlink(missing_ok=True)
            raise disk_unavailable() from None

    def open(self, key):
        """The object's bytes as an open binary file; FileNotFoundError when they are gone."""
        return open(os.path.join(self.objects, key[:2], key), "rb")  # noqa: SIM115 (the response closes it)

    def fetch(self, key, path):
        """The bytes under `key` at the local `path` too (a hard link: no byte copied, and the bytes
        stay there when the key is deleted); FileNotFoundError when they are gone."""
        try:
            os.link(self.path(key), path)
        except FileNotFoundError:
            raise
        except OSError:  # another file system, or links refused: a copy
            shutil.copyfile(self.path(key), path)

    def keys(self):
        """Every key that has bytes here."""
        for folder in Path(self.objects).glob("??"):
            if folder.is_dir():
                yield from (entry.name for entry in folder.iterdir() if entry.is_file())

    def delete(self, key):
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:  # the row is gone already: what is left is a file no row names
            log.warning("could not delete the stored object %s: %s", key, exc.strerror)


def backend():
    """This app's backend, made on first use from STORAGE_BACKEND."""
    cache = state()
    if cache.storage_backend is None:
        if setting("STORAGE_BACKEND") == "s3":
            from storage.s3 import S3  # boto3 is imported only by those who use it

            cache.storage_backend = S3.from_settings(setting)
        else:
            cache.storage_backend = Disk(setting("STORAGE_ROOT"))
    return cache.storage_backend


def staging_directory(root=None):
    """Where bodies are received: STORAGE_ROOT/.tmp (`root`: STORAGE_ROOT outside a request)."""
    return Path(root or setting("STORAGE_ROOT")) / ".tmp"
