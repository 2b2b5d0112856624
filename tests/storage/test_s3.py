"""STORAGE_BACKEND=s3 against a real S3-compatible server on 127.0.0.1 (moto's server, started by
the tests), on both databases: the same API, the bytes in the S3 bucket under random keys."""

import boto3
import pytest

from support import free_port

moto_server = pytest.importorskip("moto.server")

UPLOAD = {"Content-Type": "text/plain"}


@pytest.fixture(scope="session")
def s3_endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint, request):
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip
    name = f"minibase-{abs(hash(request.node.nodeid)) % 10**8}"
    client.create_bucket(Bucket=name)
    yield client, name
    client.close()


@pytest.fixture
def app(make_app, tables_config, storage_root, s3, s3_endpoint):
    return make_app(
        TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(storage_root), STORAGE_BACKEND="s3",
        S3_ENDPOINT=s3_endpoint, S3_BUCKET=s3[1], S3_ACCESS_KEY_ID="test", S3_SECRET_ACCESS_KEY="test",
    )  # fmt: skip


def keys(s3):
    client, bucket = s3
    return [item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_objects_live_in_the_s3_bucket(service, api, s3, storage_root):
    assert service.post("/storage/v1/object/locked/a/b.txt", data=b"hello", headers=UPLOAD).status_code == 200
    assert len(keys(s3)) == 1 and keys(s3)[0].startswith("objects/") and "b.txt" not in keys(s3)[0]
    got = service.get("/storage/v1/object/locked/a/b.txt")
    assert got.data == b"hello" and got.headers["ETag"] == '"5d41402abc4b2a76b9719d911017c592"'
    part = service.get("/storage/v1/object/locked/a/b.txt", headers={"Range": "bytes=1-2"})
    assert part.status_code == 206 and part.data == b"el"
    replaced = service.post(
        "/storage/v1/object/locked/a/b.txt", data=b"again", headers={**UPLOAD, "x-upsert": "true"}
    )
    assert replaced.status_code == 200 and len(keys(s3)) == 1
    body = {"bucketId": "locked", "sourceKey": "a/b.txt", "destinationKey": "c.txt"}
    assert service.post("/storage/v1/object/copy", json=body).status_code == 200 and len(keys(s3)) == 2
    assert service.get("/storage/v1/object/locked/c.txt").data == b"again"
    removed = service.delete("/storage/v1/object/locked", json={"prefixes": ["a/b.txt", "c.txt"]})
    assert len(removed.json) == 2 and keys(s3) == []
    assert list((storage_root / ".tmp").glob("*")) == []


def test_s3_that_does_not_answer_is_a_503(make_app, tables_config, storage_root, service_key):
    from support import Api, assert_storage_error

    app = make_app(TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(storage_root), STORAGE_BACKEND="s3",
                   S3_ENDPOINT=f"http://127.0.0.1:{free_port()}", S3_BUCKET="gone",
                   S3_ACCESS_KEY_ID="x", S3_SECRET_ACCESS_KEY="x")  # fmt: skip
    app.extensions["minibase"].storage_backend = None
    client = Api(app, service_key)
    assert_storage_error(client.post("/storage/v1/object/locked/x.txt", data=b"x", headers=UPLOAD), 503)
    assert client.post("/storage/v1/object/list/locked", json={}).json == []  # no row was kept


def test_signed_uploads_and_copies_keep_the_rules_on_s3(api, browser, s3, user_token):
    """The write paths that differ on S3 (a signed upload placed by upload_file, a copy made by the
    server): held to the same rules, and a refused one leaves no key behind."""
    from support import assert_storage_error

    objects = "/storage/v1/object"
    ann, bob = user_token("ann@example.com"), user_token("bob@example.com")
    assert api.post(f"{objects}/avatars/a.txt", data=b"ann's", token=ann, headers=UPLOAD).status_code == 200
    upsert = {"x-upsert": "true"}
    assert_storage_error(api.post(f"{objects}/upload/sign/avatars/a.txt", token=bob, headers=upsert), 403)
    signed = api.post(f"{objects}/upload/sign/avatars/b.txt", token=ann, headers=upsert).json
    assert api.post(f"{objects}/avatars/b.txt", data=b"bob's", token=bob, headers=UPLOAD).status_code == 200
    assert_storage_error(browser.put(f"/storage/v1{signed['url']}", data=b"ann's", headers=UPLOAD), 403)
    assert len(keys(s3)) == 2
    api.post(f"{objects}/private/ann/big.txt", data=b"x" * 2000, token=ann, headers=UPLOAD)
    copy = {"bucketId": "private", "sourceKey": "ann/big.txt", "destinationBucket": "avatars",
            "destinationKey": "big.txt"}  # fmt: skip
    assert_storage_error(api.post(f"{objects}/copy", json=copy, token=ann), 413, "EntityTooLarge")
    assert len(keys(s3)) == 3
    assert api.get(f"{objects}/public/avatars/b.txt").data == b"bob's"


def test_resumable_upload_parts_live_in_the_s3_bucket(service, s3, storage_root):
    """A resumable upload's chunks are kept under uploads/ in the S3 bucket until the last one; then
    the object is under objects/ and the chunks are gone. An abandoned upload's go when it ends."""
    import base64

    tus = {"Tus-Resumable": "1.0.0"}
    chunk = {**tus, "Content-Type": "application/offset+octet-stream"}

    def begin(name):
        described = (
            f"bucketName {base64.b64encode(b'locked').decode()},objectName {base64.b64encode(name).decode()}"
        )
        created = service.post(
            "/storage/v1/upload/resumable",
            headers={**tus, "Upload-Length": "10", "Upload-Metadata": described},
        )
        assert created.status_code == 201
        return created.headers["Location"].split("://", 1)[1].split("/", 1)[1]

    where = "/" + begin(b"tus.bin")
    assert service.patch(where, data=b"01234", headers={**chunk, "Upload-Offset": "0"}).status_code == 204
    assert [key.split("/")[0] for key in keys(s3)] == ["uploads"]
    done = service.patch(where, data=b"56789", headers={**chunk, "Upload-Offset": "5"})
    assert done.status_code == 204 and done.headers["Tus-Complete"] == "1"
    assert [key.split("/")[0] for key in keys(s3)] == ["objects"]
    assert service.get("/storage/v1/object/locked/tus.bin").data == b"0123456789"

    abandoned = "/" + begin(b"abandoned.bin")
    assert service.patch(abandoned, data=b"01234", headers={**chunk, "Upload-Offset": "0"}).status_code == 204
    assert len(keys(s3)) == 2
    assert service.delete(abandoned, headers=tus).status_code == 204
    assert [key.split("/")[0] for key in keys(s3)] == ["objects"]
    assert list((storage_root / ".tmp").glob("*")) == []
