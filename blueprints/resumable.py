"""/storage/v1/upload/resumable: resumable uploads, TUS 1.0 as Supabase Storage serves them
(tus-js-client, Uppy's tus plugin). The views read TUS's headers (Tus-Resumable, Upload-Length,
Upload-Offset, Upload-Metadata with bucketName, objectName, contentType, cacheControl and metadata;
x-upsert) and call storage.resumable, as the caller or, under /sign, as the user who signed the
upload URL whose token is in x-signature; errors are answered as Supabase answers them here, the message
as text/plain, which the TUS clients show."""

import base64
import binascii
import dataclasses
import datetime
import re

from flask import Blueprint, Response, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.http import http_date

from blueprints import responses
from blueprints.gateway import identity
from blueprints.storage import cache_control, parse_metadata, signer
from config import setting
from errors import APIError, Storage, invalid_request, storage_error
from storage import buckets, media_types, objects, resumable, signing
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
    """As Supabase's TUS server answers an error: the message alone, as text. The gateway's own (no
    API key, a bad one) keep the JSON body they have on every path, as Supabase's gateway sends it."""
    if error.api not in (None, "storage"):
        return responses.render(error)
    return Response(
        error.message, error.status, {**error.headers, "Content-Type": "text/plain; charset=utf-8"}
    )


@bp.errorhandler(HTTPException)
def tus_http_error(error):
    return Response(error.description, error.code, {"Content-Type": "text/plain; charset=utf-8"})


@bp.route("", methods=["OPTIONS"])
@bp.route("/<upload_id>", methods=["OPTIONS"])
@bp.route("/sign", methods=["OPTIONS"])
@bp.route("/sign/<upload_id>", methods=["OPTIONS"])
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
    return begin(read_creation(), identity(), "resumable.status")


@bp.post("/sign")
def create_signed():
    """Begin an upload with a signed upload URL's token (x-signature) instead of credentials: as the
    user who signed it, for the object it names, replacing one only if it was signed with x-upsert."""
    creation = read_creation()
    who, claims = signed(creation.bucket_id, creation.name)
    creation = dataclasses.replace(creation, upsert=claims.get("upsert") is True)
    return begin(creation, who, "resumable.status_signed")


def begin(creation, who, endpoint):
    with_data = bool(request.content_length) or request.headers.get("Content-Type") == CHUNK_TYPE
    if with_data:
        chunk_type()
        request.max_content_length = setting("STORAGE_FILE_SIZE_LIMIT")
    created = resumable.create(who, creation)
    headers = {"Location": url_for(endpoint, upload_id=created.upload_id, _external=True)}
    headers.update(expiry(created))
    if with_data or creation.length == 0:  # an empty file is whole once begun
        body = request.upload_stream()
        progress = resumable.append(created.upload_id, who, 0, body, request.content_length)
        headers["Upload-Offset"] = str(progress.received)
    return Response(status=201, headers=headers)


@bp.route("/<upload_id>", methods=["HEAD"])
def status(upload_id):
    return answer_status(upload_id, identity())


@bp.route("/sign/<upload_id>", methods=["HEAD"])
def status_signed(upload_id):
    return answer_status(upload_id, signed_upload(upload_id))


def answer_status(upload_id, who):
    progress = resumable.status(upload_id, who)
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
    return receive_chunk(upload_id, identity)


@bp.patch("/sign/<upload_id>")
def append_signed(upload_id):
    return receive_chunk(upload_id, lambda: signed_upload(upload_id))


def receive_chunk(upload_id, caller):
    chunk_type()
    offset = header_number("Upload-Offset")
    request.max_content_length = setting("STORAGE_FILE_SIZE_LIMIT")
    progress = resumable.append(upload_id, caller(), offset, request.upload_stream(), request.content_length)
    headers = {"Upload-Offset": str(progress.received), **expiry(progress)}
    if progress.done:
        headers["Tus-Complete"] = "1"
    return Response(status=204, headers=headers)


@bp.delete("/<upload_id>")
def terminate(upload_id):
    resumable.terminate(upload_id, identity())
    return Response(status=204)


@bp.delete("/sign/<upload_id>")
def terminate_signed(upload_id):
    resumable.terminate(upload_id, signed_upload(upload_id))
    return Response(status=204)


# --- signed uploads: the token of a signed upload URL in x-signature


def signed(bucket_id, name):
    """(the Identity of the user who signed the x-signature token, its claims), when it is an upload
    token for exactly this object, unexpired; a 400 otherwise, as for a signed upload."""
    token = request.headers.get("x-signature")
    if not token:
        raise storage_error(400, Storage.INVALID_SIGNATURE, "Missing x-signature header", "InvalidSignature")
    objects.check_name(name)
    claims = signing.verify(token, bucket_id, name, signing.UPLOAD)
    return signer(claims.get("signer")), claims


def signed_upload(upload_id):
    """The caller of a request on a signed upload's URL: the signer of its x-signature token, which
    must be signed for the object the upload makes (a 404 for an id that names none)."""
    parsed = resumable.parse_id(upload_id)
    if parsed is None:
        raise resumable.not_found()
    return signed(parsed[0], parsed[1])[0]


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
