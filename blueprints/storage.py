"""/storage/v1: Supabase Storage's wire format. The views turn the request into what storage/ takes
(the caller, the object's name, the body as a stream), call one service function, and shape its
answer; downloads stream the object's file with its ETag, Last-Modified and Cache-Control."""

import base64
import binascii
import hmac
import re
import unicodedata
from urllib.parse import quote

from flask import Blueprint, abort, current_app, g, json, request
from werkzeug.http import dump_options_header, http_date, quote_etag
from werkzeug.wsgi import wrap_file

from auth import tokens
from auth.identity import Identity, signing_session
from blueprints.gateway import identity
from config import setting
from errors import Storage, invalid_request, storage_error
from storage import buckets, files, images, listing, listing_v2, media_types, objects, signing, transfers
from values import strict_json, whole_number

bp = Blueprint("storage", __name__, url_prefix="/storage/v1")

# Media types a browser would run as a page of the API's origin: always sent as attachments.
ACTIVE_TYPES = frozenset({"text/html", "application/xhtml+xml", "image/svg+xml", "text/xml",
                          "application/xml", "text/xsl", "application/xslt+xml",
                          "multipart/x-mixed-replace"})  # fmt: skip
# Whatever a file holds, it runs nothing and loads nothing as a page of this origin.
SANDBOX = "default-src 'none'; style-src 'unsafe-inline'; sandbox"
CACHE_CONTROL = re.compile(r"[A-Za-z0-9=,\- ]{1,255}")
MULTIPART_OVERHEAD = 1024 * 1024  # the form's other fields and boundaries, beyond the file itself
MAX_METADATA = 8 * 1024


@bp.before_request
def declared_buckets():
    buckets.ensure_synced()


# --- buckets


@bp.get("/bucket")
def list_buckets():
    return json.dumps(buckets.list_buckets(identity())), {"Content-Type": "application/json"}


@bp.get("/bucket/<bucket_id>")
def get_bucket(bucket_id):
    return buckets.get_bucket(bucket_id, identity())


@bp.post("/bucket")
def create_bucket():
    return buckets.create_bucket(json_body(), identity())


@bp.put("/bucket/<bucket_id>")
def update_bucket(bucket_id):
    return buckets.update_bucket(bucket_id, json_body(), identity())


@bp.post("/bucket/<bucket_id>/empty")
def empty_bucket(bucket_id):
    return buckets.empty_bucket(bucket_id, identity(), files.backend())


@bp.delete("/bucket/<bucket_id>")
def delete_bucket(bucket_id):
    return buckets.delete_bucket(bucket_id, identity())


# --- objects


@bp.route("/object/<bucket_id>/<path:name>", methods=["POST", "PUT"])
def upload(bucket_id, name):
    replace = request.method == "PUT"
    upsert = not replace and request.headers.get("x-upsert", "").lower() == "true"
    return objects.upload(bucket_id, name, identity(), upload_body(), upsert=upsert, replace=replace)


@bp.get("/object/<bucket_id>/<path:name>")
@bp.get("/object/authenticated/<bucket_id>/<path:name>")
def download(bucket_id, name):
    wanted = download_name(request.args.get("download"))  # before the file is opened
    return serve(*objects.open_object(bucket_id, name, identity()), wanted)


@bp.get("/object/public/<bucket_id>/<path:name>")
def download_public(bucket_id, name):
    wanted = download_name(request.args.get("download"))  # before the file is opened
    return serve(*objects.open_object(bucket_id, name, None, public=True), wanted)


@bp.get("/object/sign/<bucket_id>/<path:name>")
def download_signed(bucket_id, name):
    signing.verify(request.args.get("token"), bucket_id, name, signing.DOWNLOAD)
    wanted = download_name(request.args.get("download"))  # before the file is opened
    return serve(*objects.open_object(bucket_id, name, None, signed=True), wanted)


@bp.get("/object/info/<bucket_id>/<path:name>")
@bp.get("/object/info/authenticated/<bucket_id>/<path:name>")
def info(bucket_id, name):
    return objects.info(objects.find(bucket_id, name, identity()))


@bp.get("/object/info/public/<bucket_id>/<path:name>")
def info_public(bucket_id, name):
    return objects.info(objects.find(bucket_id, name, None, public=True))


@bp.post("/object/list/<bucket_id>")
def list_objects(bucket_id):
    listed = listing.list_objects(bucket_id, identity(), listing.listing(json_body()))
    return json.dumps(listed), {"Content-Type": "application/json"}


@bp.post("/object/list-v2/<bucket_id>")
def list_page(bucket_id):
    return listing_v2.list_page(bucket_id, identity(), listing_v2.page(json_body()))


@bp.post("/object/move")
def move():
    return transfers.move(json_body(), identity())


@bp.post("/object/copy")
def copy():
    upsert = request.headers.get("x-upsert", "").lower() == "true"
    return transfers.copy(json_body(), identity(), upsert=upsert)


@bp.delete("/object/<bucket_id>")
def remove(bucket_id):
    deleted = transfers.remove(bucket_id, json_body().get("prefixes"), identity())
    return json.dumps(deleted), {"Content-Type": "application/json"}


@bp.delete("/object/<bucket_id>/<path:name>")
def remove_one(bucket_id, name):
    objects.check_name(name)
    if not transfers.remove(bucket_id, [name], identity()):
        raise objects.object_not_found()
    return {"message": "Successfully deleted"}


@bp.post("/object/sign/<bucket_id>/<path:name>")
def sign(bucket_id, name):
    body = json_body()
    wanted = body.get("transform")
    transform = images.transform(wanted) if isinstance(wanted, dict) and wanted else None
    return objects.sign_download(bucket_id, name, identity(), body.get("expiresIn"), transform)


@bp.post("/object/sign/<bucket_id>")
def sign_many(bucket_id):
    body = json_body()
    signed = objects.sign_downloads(bucket_id, body.get("paths"), identity(), body.get("expiresIn"))
    return json.dumps(signed), {"Content-Type": "application/json"}


@bp.post("/object/upload/sign/<bucket_id>/<path:name>")
def sign_upload(bucket_id, name):
    upsert = request.headers.get("x-upsert", "").lower() == "true"
    return objects.sign_upload(bucket_id, name, identity(), upsert=upsert)


@bp.put("/object/upload/sign/<bucket_id>/<path:name>")
def upload_signed(bucket_id, name):
    """The upload a signed URL allows, made as the user who signed it, under their rules as they are
    now: the object may have appeared, or changed hands, since."""
    objects.check_name(name)
    claims = signing.verify(request.args.get("token"), bucket_id, name, signing.UPLOAD)
    who = signer(claims.get("signer"))
    return objects.upload(bucket_id, name, who, upload_body(), upsert=claims.get("upsert") is True)


# --- image renditions


@bp.get("/render/image/<kind>/<bucket_id>/<path:name>")
def render_image(kind, bucket_id, name):
    """An image resized: from a public bucket, by the caller's rules, or with a signed token (whose
    own transformation, if it was signed with one, wins over the query string)."""
    if kind not in ("public", "authenticated", "sign"):
        abort(404)
    wanted, who = request.args, None
    if kind == "sign":
        claims = signing.verify(request.args.get("token"), bucket_id, name, signing.DOWNLOAD)
        wanted = claims.get("transform") or wanted
    elif kind == "authenticated":
        who = identity()
    transform = images.transform(wanted)  # a bad one is refused before the file is opened
    stored, file = objects.open_object(bucket_id, name, who, public=kind == "public", signed=kind == "sign")
    with file:
        data, mimetype = images.render(file, transform)
    headers = {
        "Content-Type": mimetype,
        "Cache-Control": stored.cache_control,
        "Content-Security-Policy": SANDBOX,
    }
    if transform.described():
        headers["X-Transformations"] = transform.described()
    return data, headers


# --- reading the request


def signer(claims):
    """The Identity a signed upload token was made by: an API key's role, or the user, as they are
    now, in the session that signed it; a 400 when that session has ended, or the user is gone, may
    no longer sign in, or is another account under the same id."""
    claims = claims if isinstance(claims, dict) else {}
    role, user = claims.get("role"), claims.get("user")
    if role in ("anon", "service_role") and user is None:
        return Identity(role)
    user_id = tokens.user_id_of(user) if role == "authenticated" and isinstance(user, str) else None
    who = signing_session(user_id, claims.get("session")) if user_id is not None else None
    if who is None or not hmac.compare_digest(
        signing.account_of(who).encode(), str(claims.get("account")).encode()
    ):
        raise storage_error(
            400, Storage.INVALID_JWT, "The user who signed this URL cannot upload", "InvalidJWT"
        )
    return who


def json_body():
    """The body as a JSON object ({} when there is none): strict, so nothing that cannot be stored
    or takes unbounded work to walk (NaN, unpaired surrogates, deep nesting)."""
    raw = request.get_data(cache=False)
    try:
        body = strict_json(raw) if raw.strip() else {}
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise invalid_request("The body must be a JSON object")
    return body


def upload_body():
    """The uploaded file as a stream, raw (the body itself, labelled by its headers) or the first
    file of a multipart form (labelled by the form's cacheControl and metadata fields)."""
    limit = setting("STORAGE_FILE_SIZE_LIMIT")
    if request.mimetype == "multipart/form-data":
        request.max_content_length = limit + MULTIPART_OVERHEAD
        # Each file of the form is parsed into a Spool in STORAGE_ROOT/.tmp, hashed on the way, which
        # the upload takes as it is (werkzeug's own temporary file was copied and hashed again).
        # removed when the request ends (close_form_spools), parsed or not
        g.form_spools = request.spool_form_files(files.staging_directory())
        part = next(iter(request.files.values()), None)
        if part is None:
            raise invalid_request("No content provided")
        seconds = request.form.get("cacheControl") or ""
        cache = f"max-age={seconds}" if whole_number(seconds) is not None else cache_control(seconds or None)
        metadata = parse_metadata(request.form.get("metadata"), encoded=False)
        return objects.Upload(part.stream, media_types.of_request(part.content_type), cache, metadata)
    request.max_content_length = limit
    metadata = parse_metadata(request.headers.get("x-metadata"), encoded=True)
    return objects.Upload(
        request.upload_stream(),  # counted against the limit by the upload, either way
        media_types.of_request(request.headers.get("Content-Type")),
        cache_control(request.headers.get("cache-control")),
        metadata,
    )


@bp.teardown_request  # the views that call upload_body are this blueprint's
def close_form_spools(_error):
    """The files a form was parsed into that no upload took are removed when the request ends. A
    form cut off mid-file is parsed as an empty one, and werkzeug drops the part it was writing
    without closing it: left open, its Spool's file would stay in STORAGE_ROOT/.tmp."""
    for spool in g.pop("form_spools", ()):
        spool.close()


def cache_control(value):
    if value is None:
        return "no-cache"
    if not CACHE_CONTROL.fullmatch(value):
        raise invalid_request("cache-control must be a Cache-Control value such as max-age=3600")
    return value


def parse_metadata(value, encoded):
    """User metadata: a JSON object, base64-encoded in the x-metadata header."""
    if value is None or value == "":
        return None
    if len(value) > MAX_METADATA * 2:
        raise invalid_request("The metadata is too large")
    try:
        metadata = strict_json(base64.b64decode(value, validate=True) if encoded else value.encode("utf-8"))
    except (binascii.Error, UnicodeError, ValueError):
        raise invalid_request("The metadata must be a JSON object (base64-encoded in x-metadata)") from None
    if not isinstance(metadata, dict) or len(json.dumps(metadata)) > MAX_METADATA:
        raise invalid_request("The metadata must be a JSON object of at most 8 KB")
    return metadata


# --- answering with a file


def download_name(value):
    """?download[=name]: None without it, "" for the object's own name; a 400 for a name a header
    cannot carry (control characters, line breaks) or too long to be a file's."""
    if value is None or value == "":
        return value
    if len(value) > objects.MAX_NAME_CHARACTERS or any(
        unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in value
    ):
        raise invalid_request("download must be a file name without control characters or line breaks")
    return value


# What makes a download conditional or partial (a 304, 206 or 416): without any, the answer is the whole file.
CONDITIONAL_HEADERS = ("HTTP_RANGE", "HTTP_IF_RANGE", "HTTP_IF_MATCH", "HTTP_IF_NONE_MATCH",
                       "HTTP_IF_MODIFIED_SINCE", "HTTP_IF_UNMODIFIED_SINCE")  # fmt: skip


def serve(stored, file, wanted=None):
    """The object's bytes, streamed: conditional (ETag, Last-Modified, 304), ranges (206), its
    Cache-Control, never rendered as a page of this origin. `wanted`: download_name's answer. The
    response is made with all its headers at once: send_file and a header set at a time cost a
    download a tenth of its CPU."""
    mimetype = media_types.stored(stored.mimetype)
    essence = media_types.essence(mimetype)
    environ = request.environ  # once: each use of `request` is a lookup behind Flask's proxy
    headers = {
        "Content-Length": str(stored.size),
        "ETag": quote_etag(stored.etag),
        "Last-Modified": http_date(stored.updated_at),
        "Cache-Control": stored.cache_control,
        "Content-Security-Policy": SANDBOX,
        "Accept-Ranges": "bytes",
    }
    if wanted is not None or essence in ACTIVE_TYPES or essence.endswith("+xml"):
        headers["Content-Disposition"] = attachment(wanted or stored.name.rpartition("/")[2])
    response = current_app.response_class(
        wrap_file(environ, file), mimetype=mimetype, headers=headers, direct_passthrough=True
    )
    if not any(name in environ for name in CONDITIONAL_HEADERS):
        return response  # all that make_conditional adds to a plain GET (the server adds the Date)
    return response.make_conditional(environ, accept_ranges=True, complete_length=stored.size)


def attachment(name):
    """Content-Disposition: attachment with `name`, as werkzeug's send_file writes it: a name
    outside ASCII as RFC 6266's filename*=UTF-8''… beside its closest ASCII spelling."""
    if name.isascii():
        return dump_options_header("attachment", {"filename": name})
    simple = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    quoted = quote(name, safe="!#$&+-.^_`|~")  # RFC 5987's attr-char
    return dump_options_header("attachment", {"filename": simple, "filename*": f"UTF-8''{quoted}"})
