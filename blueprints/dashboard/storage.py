"""The dashboard's Storage pages: buckets (create, edit, empty, delete) and their objects by folder
(upload, download, image previews, move, delete, a signed URL to copy)."""

from urllib.parse import quote

from flask import request, url_for

from blueprints.dashboard.base import bp, done, page
from blueprints.storage import download_name, serve
from dashboard import storage as storage_pages  # the Storage pages' work; storage/ is the API's
from errors import invalid_request
from storage import media_types

SIGNED_URL_SECONDS = 3600
PREVIEWED = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/avif")


def settings_from_form():
    return storage_pages.settings_body(
        request.form.get("public") == "on",
        request.form.get("file_size_limit", ""),
        request.form.get("allowed_mime_types", ""),
    )


@bp.get("/storage")
def storage_page():
    return page("storage.html", buckets=storage_pages.all_buckets())


@bp.post("/storage")
def create_bucket():
    name = request.form.get("name", "")
    storage_pages.create_bucket(name, settings_from_form())
    return done(".bucket_page", "bucket-created", bucket_id=name)


def folder_of(prefix):
    """A folder prefix as the listing takes it: empty, or ending in one slash."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


@bp.get("/storage/<bucket_id>")
def bucket_page(bucket_id):
    bucket = storage_pages.bucket(bucket_id)
    prefix = folder_of(request.args.get("prefix", "")[:1024])
    entries = storage_pages.folder(bucket_id, prefix)
    parts = prefix.strip("/").split("/") if prefix else []
    crumbs = [(part, "/".join(parts[: index + 1])) for index, part in enumerate(parts)]
    return page(
        "bucket.html", bucket=bucket, prefix=prefix, entries=entries, crumbs=crumbs, previewed=PREVIEWED,
        signed=request.args.get("signed"),
    )  # fmt: skip


@bp.post("/storage/<bucket_id>/settings")
def save_bucket(bucket_id):
    storage_pages.update_bucket(bucket_id, settings_from_form())
    return done(".bucket_page", "bucket-saved", bucket_id=bucket_id)


@bp.post("/storage/<bucket_id>/empty")
def empty_bucket(bucket_id):
    confirmed(bucket_id)
    storage_pages.empty_bucket(bucket_id)
    return done(".bucket_page", "bucket-emptied", bucket_id=bucket_id)


@bp.post("/storage/<bucket_id>/delete")
def delete_bucket(bucket_id):
    confirmed(bucket_id)
    storage_pages.delete_bucket(bucket_id)
    return done(".storage_page", "bucket-deleted")


def confirmed(bucket_id):
    if request.form.get("confirm") != bucket_id:
        raise invalid_request("Type the bucket's name to confirm")


@bp.post("/storage/<bucket_id>/upload")
def upload(bucket_id):
    """A file from the form, stored under the folder shown (its own name, or the one given)."""
    part = request.files.get("file")
    if part is None or not part.filename:
        raise invalid_request("Choose a file to upload")
    prefix = folder_of(request.form.get("prefix", ""))
    name = prefix + (
        request.form.get("name", "").strip() or part.filename.replace("\\", "/").rpartition("/")[2]
    )
    storage_pages.upload(bucket_id, name, part.stream, media_types.of_request(part.content_type))
    return done(".bucket_page", "uploaded", bucket_id=bucket_id, prefix=prefix)


@bp.get("/storage/<bucket_id>/object/<path:name>")
def download(bucket_id, name):
    """The object's bytes, as Storage serves them (active types as attachments, sandboxed)."""
    return serve(*storage_pages.open_object(bucket_id, name), download_name(request.args.get("download")))


@bp.post("/storage/<bucket_id>/move")
def move(bucket_id):
    name, destination = request.form.get("name", ""), request.form.get("destination", "").strip()
    storage_pages.move(bucket_id, name, destination)
    return done(
        ".bucket_page", "moved", bucket_id=bucket_id, prefix=folder_of(destination.rpartition("/")[0])
    )


@bp.post("/storage/<bucket_id>/remove")
def remove(bucket_id):
    name = request.form.get("name", "")
    storage_pages.remove(bucket_id, name)
    return done(
        ".bucket_page", "file-deleted", bucket_id=bucket_id, prefix=folder_of(name.rpartition("/")[0])
    )


@bp.post("/storage/<bucket_id>/sign")
def sign(bucket_id):
    """A signed download URL for the object, shown on the bucket's page with a button that copies it."""
    name = request.form.get("name", "")
    path, _, token = storage_pages.signed_path(bucket_id, name, SIGNED_URL_SECONDS).rpartition("?token=")
    path = f"{quote(path, safe='/')}?token={token}"
    return page(
        "signed.html", bucket_id=bucket_id, name=name, url=f"{request.host_url.rstrip('/')}/storage/v1{path}",
        seconds=SIGNED_URL_SECONDS, back=url_for(".bucket_page", bucket_id=bucket_id,
                                                 prefix=folder_of(name.rpartition("/")[0])),
    )  # fmt: skip
