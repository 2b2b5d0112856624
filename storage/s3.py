"""The bytes in an S3-compatible bucket (STORAGE_BACKEND=s3), through boto3: the same four
operations as the disk (place, copy, open, delete), each object under its random key. An S3 that
does not answer is a 503."""

import functools

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

import turns
from errors import Storage, storage_error

PREFIX = "objects/"
MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def unavailable(operation):
    """`operation` with boto3's errors turned into the 503 of an S3 that does not answer."""

    @functools.wraps(operation)
    def wrapped(*args, **kwargs):
        try:
            with turns.waiting():  # on the network: another request may run
                return operation(*args, **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING:
                raise FileNotFoundError(args[-1]) from None
            raise storage_error(503, Storage.UNAVAILABLE, "The storage backend refused the request") from None
        except BotoCoreError:
            raise storage_error(503, Storage.UNAVAILABLE, "The storage backend is not answering") from None

    return wrapped


class S3:
    def __init__(self, client, bucket, prefix=PREFIX):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def beside(self, area):
        """The same bucket, keys under `area`/ (uploads/: the parts of resumable uploads)."""
        return S3(self.client, self.bucket, f"{area}/")

    @classmethod
    def from_settings(cls, setting):
        return cls(client(setting), setting("S3_BUCKET"))

    @unavailable
    def place(self, received, key):
        self.client.upload_file(received.path, self.bucket, self.prefix + key)  # in parts when large

    @unavailable
    def copy(self, key, new_key):
        self.client.copy(
            {"Bucket": self.bucket, "Key": self.prefix + key}, self.bucket, self.prefix + new_key
        )

    @unavailable
    def open(self, key):
        """The object's bytes as a stream to read and close; FileNotFoundError when they are gone."""
        return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]

    @unavailable
    def fetch(self, key, path):
        """The bytes under `key` downloaded to the local `path`; FileNotFoundError when they are gone."""
        self.client.download_file(self.bucket, self.prefix + key, str(path))

    @unavailable
    def keys(self):
        """Every key that has bytes here (the whole list: a generator would escape `unavailable`)."""
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            found.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", ()))
        return found

    @unavailable
    def delete(self, key):
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)


def client(setting):
    """A boto3 S3 client from the S3_* settings: the storage's, and the backups' (an s3:// BACKUP_TO)."""
    return boto3.client(
        "s3",
        endpoint_url=setting("S3_ENDPOINT"),
        region_name=setting("S3_REGION"),
        aws_access_key_id=setting("S3_ACCESS_KEY_ID"),
        aws_secret_access_key=setting("S3_SECRET_ACCESS_KEY"),
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=5,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )
