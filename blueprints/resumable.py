"""/storage/v1/upload/resumable: resumable uploads, TUS 1.0 as Supabase Storage serves them
(tus-js-client, Uppy's tus plugin). The views read TUS's headers (Tus-Resumable, Upload-Length,
Upload-Offset, Upload-Metadata with bucketName, objectName, contentType, cacheControl and metadata;
x-upsert) and call storage.resumable; errors are answered as Supabase answers them here, the message
as text/plain, which the TUS clients show."""

import base64
import binascii
import datetime
import re

from flask import Blueprint, Response, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.http import http_date

from blueprints.gateway import identity
from blueprints.storage import cache_control, parse_metadata
from config import setting
from errors import APIError, Storage, invalid_request, storage_error
from storage import buckets, media_types, objects, resumable
from values import whole_number

bp = Blueprint("resumable", __name__, url_prefix="/storage/v1/upload/resumable")

VERSION = "1.0.0"
EXTENSIONS = "creation,creation-with-upload,termination,expiration"
CHUNK_TYPE = "application/offset+octet-stream"
DIGITS = re.compile(r"[0-9]{1,19}")
METADATA_KEY = re.compile(r"[!-+\--~]{1,64}")  # printable ASCII but space and comma
MAX_METADATA_HEADER = 16 * 1024
MAX_LENGTH = 2**63 - 1


@bp.before_request
def tus_version():
    buckets.ensure_synced()
    if request.method != "OPTIONS" and request.headers.get("Tus-Resumable") != VERSION:
        message = "Tus-Resumable must be 1.0.0"
        raise APIError(412, Storage.INVALID_REQUEST, message, headers={"Tus-Version": VERSION}, api="storage")


@bp.after_request
def tus_headers(response):
    response.headers["Tus-Resumable"] = VERSION
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.errorhandler(APIError)
def tus_error(error):
    """As Supabase's TUS server answers an error: the message alone, as text."""
    return Response(
        error.message, error.status, {**error.headers, "Content-Type": "text/plain; charset=utf-8"}
    )


@bp.errorhandler(HTTPException)
def tus_http_error(error):
    return Response(error.description, error.code, {"Content-Type": "text/plain; charset=utf-8"})


@bp.route("", methods=["OPTIONS"])
@bp.route("/<upload_id>", methods=["OPTIONS"])
def options(upload_id=None):
    """What this server offers: TUS 1.0, its extensions and the largest upload."""
    headers = {
        "Tus-Version": VERSION,
        "Tus-Extension": EXTENSIONS,
        "Tus-Max-Size": str(setting("STORAGE_FILE_SIZE_LIMIT")),
    }
    return Response(status=204, headers=headers)


@bp.post("")
def create():
    """Begin an upload (and, with a chunk in the body, receive it)."""
    creation = read_creation()
    with_data = bool(request.content_length) or request.headers.get("Content-Type") == CHUNK_TYPE
    if with_data:
        chunk_type()
        request.max_content_length = setting("STORAGE_FILE_SIZE_LIMIT")
    who = identity()
    created = resumable.create(who, creation)
    headers = {"Location": url_for("resumable.status", upload_id=created.upload_id, _external=True)}
    headers.update(expiry(created))
    if with_data or creation.length == 0:  # an empty file is whole once begun
        progress = resumable.append(created.upload_id, who, 0, request.stream, request.content_length)
        headers["Upload-Offset"] = str(progress.received)
    return Response(status=201, headers=headers)


@bp.route("/<upload_id>", methods=["HEAD"])
def status(upload_id):
    progress = resumable.status(upload_id, identity())
    headers = {
        "Upload-Offset": str(progress.received),
        "Upload-Length": str(progress.length),
        **expiry(progress),
    }
    if progress.metadata_header:
        headers["Upload-Metadata"] = progress.metadata_header
    return Response(status=200, headers=headers)


@bp.patch("/<upload_id>")
def append(upload_id):
    chunk_type()
    offset = header_number("Upload-Offset")
    request.max_content_length = setting("STORAGE_FILE_SIZE_LIMIT")
    progress = resumable.append(upload_id, identity(), offset, request.stream, request.content_length)
    headers = {"Upload-Offset": str(progress.received), **expiry(progress)}
    if progress.done:
        headers["Tus-Complete"] = "1"
    return Response(status=204, headers=headers)


@bp.delete("/<upload_id>")
def terminate(upload_id):
    resumable.terminate(upload_id, identity())
    return Response(status=204)


# --- reading TUS's headers


def chunk_type():
    if request.headers.get("Content-Type") != CHUNK_TYPE:
        raise storage_error(
            415, Storage.INVALID_REQUEST, f"Content-Type must be {CHUNK_TYPE}", "Unsupported Media Type"
        )


def header_number(name):
    value = request.headers.get(name)
    if value is None or not DIGITS.fullmatch(value) or int(value) > MAX_LENGTH:
        raise invalid_request(f"{name} must be a number of bytes")
    return int(value)


def read_creation():
    """The upload a POST declares: its length, Upload-Metadata's bucketName, objectName, contentType,
    cacheControl (seconds) and metadata (JSON), x-upsert."""
    if "Upload-Defer-Length" in request.headers or "Upload-Concat" in request.headers:
        raise invalid_request("Upload-Length is required: deferred lengths and concatenation are not offered")
    length = header_number("Upload-Length")
    metadata = upload_metadata(request.headers.get("Upload-Metadata"))
    bucket_id, name = metadata.get("bucketName"), metadata.get("objectName")
    if not bucket_id or not name:
        raise invalid_request("Upload-Metadata must name the bucketName and objectName")
    seconds = metadata.get("cacheControl") or ""
    cache = f"max-age={seconds}" if whole_number(seconds) is not None else cache_control(seconds or None)
    upload = objects.Upload(
        None,
        media_types.of_request(metadata.get("contentType")),
        cache,
        parse_metadata(metadata.get("metadata"), encoded=False),
    )
    upsert = request.headers.get("x-upsert", "").lower() == "true"
    return resumable.Creation(bucket_id, name, length, upsert, upload, request.headers.get("Upload-Metadata"))


def upload_metadata(header):
    """Upload-Metadata: comma-separated `key base64(value)` pairs (a key alone has an empty value), as
    TUS defines it; a 400 for anything else, a duplicate key or a value that is not UTF-8."""
    if header is None or header.strip() == "":
        return {}
    if len(header) > MAX_METADATA_HEADER:
        raise invalid_request("Upload-Metadata is too large")
    pairs = {}
    for item in header.split(","):
        key, _, value = item.strip().partition(" ")
        if not METADATA_KEY.fullmatch(key) or key in pairs:
            raise invalid_request("Upload-Metadata must be comma-separated pairs of a key and a base64 value")
        try:
            pairs[key] = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise invalid_request(f"Upload-Metadata's {key[:64]} is not base64 of UTF-8 text") from None
    return pairs


def expiry(progress):
    if progress.expires_at is None:
        return {}
    return {"Upload-Expires": http_date(progress.expires_at.replace(tzinfo=datetime.UTC))}
