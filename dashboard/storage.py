"""The Storage pages' work, through Storage's own services (storage/: buckets.py, objects.py,
listing.py, transfers.py) as the service key: buckets made, changed, emptied and deleted; objects
listed by folder, uploaded, downloaded, moved, removed and signed. Each change is recorded with the
unit of work that makes it."""

from auth.identity import Identity
from dashboard.actions import perform, write
from storage import buckets, files, listing, objects, transfers

SERVICE = Identity("service_role")


def all_buckets():
    return buckets.list_buckets(SERVICE)


def bucket(bucket_id):
    return buckets.get_bucket(bucket_id, SERVICE)


def settings_body(public, file_size_limit, mime_types):
    """A bucket API body from the form's fields."""
    types = [part.strip() for part in mime_types.replace("\n", ",").split(",") if part.strip()]
    return {
        "public": public,
        "file_size_limit": file_size_limit.strip() or None,
        "allowed_mime_types": types or None,
    }


def create_bucket(name, body):
    return perform("bucket_created", f"bucket {name}", buckets.create_bucket, {**body, "id": name}, SERVICE)


def update_bucket(bucket_id, body):
    return perform("bucket_updated", f"bucket {bucket_id}", buckets.update_bucket, bucket_id, body, SERVICE)


def empty_bucket(bucket_id):
    target = f"bucket {bucket_id}"
    return perform("bucket_emptied", target, buckets.empty_bucket, bucket_id, SERVICE, files.backend())


def delete_bucket(bucket_id):
    return perform("bucket_deleted", f"bucket {bucket_id}", buckets.delete_bucket, bucket_id, SERVICE)


def folder(bucket_id, prefix):
    """The folders and objects right under `prefix` (which ends in / or is empty)."""
    wanted = listing.Listing(prefix=prefix, limit=objects.MAX_LIST)
    return listing.list_objects(bucket_id, SERVICE, wanted)


def upload(bucket_id, name, stream, mimetype):
    body = objects.Upload(stream, mimetype or objects.DEFAULT_MIME_TYPE)
    return perform("object_uploaded", f"{bucket_id}/{name}", objects.upload, bucket_id, name, SERVICE, body)


def open_object(bucket_id, name):
    """(metadata, open file) of an object, for a download or a preview."""
    return objects.open_object(bucket_id, name, SERVICE)


def move(bucket_id, name, destination):
    body = {"bucketId": bucket_id, "sourceKey": name, "destinationKey": destination}
    details = {"to": destination}
    return perform("object_moved", f"{bucket_id}/{name}", transfers.move, body, SERVICE, details=details)


def remove(bucket_id, name):
    objects.check_name(name)
    removed = perform("object_deleted", f"{bucket_id}/{name}", transfers.remove, bucket_id, [name], SERVICE)
    if not removed:
        raise objects.object_not_found()


def signed_path(bucket_id, name, expires_in):
    """The path (under /storage/v1) of a signed download URL: no signing writes, so its entry is a
    unit of its own."""
    signed = objects.sign_download(bucket_id, name, SERVICE, expires_in)["signedURL"]
    details = {"expires_in": expires_in}
    perform("signed_url_created", f"{bucket_id}/{name}", write, lambda: None, details=details)
    return signed
