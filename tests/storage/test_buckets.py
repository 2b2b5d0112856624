"""The bucket API (the service key's) and the buckets tables.toml declares, on both databases."""

import pytest

from app import create_app
from support import SECRET, Api, assert_storage_error
from variables import ConfigError

BUCKETS = "/storage/v1/bucket"


def test_declared_buckets_are_made_at_start(service):
    listed = {bucket["id"]: bucket for bucket in service.get(BUCKETS).json}
    assert set(listed) == {"avatars", "private", "locked"}
    avatars = listed["avatars"]
    assert (
        avatars["public"] is True and avatars["file_size_limit"] == 1000
    )  # "1KB": decimal, as Supabase reads it
    assert avatars["allowed_mime_types"] == ["image/*", "text/plain"] and avatars["name"] == "avatars"
    assert service.get(f"{BUCKETS}/avatars").json == avatars


def test_the_bucket_api_is_the_service_keys(service, api, user_token):
    assert_storage_error(api.post(BUCKETS, json={"id": "mine"}), 401, "AccessDenied")
    assert_storage_error(api.post(BUCKETS, json={"id": "mine"}, token=user_token("a@example.com")), 403)
    assert [b["id"] for b in api.get(BUCKETS).json] == ["avatars"]  # the public one; its select rule is anon
    assert_storage_error(api.get(f"{BUCKETS}/locked"), 404, "NoSuchBucket")
    made = service.post(
        BUCKETS, json={"id": "docs", "name": "docs", "public": False, "file_size_limit": "2MB"}
    )
    assert made.status_code == 200 and made.json == {"name": "docs"}
    assert service.get(f"{BUCKETS}/docs").json["file_size_limit"] == 2_000_000
    assert_storage_error(service.post(BUCKETS, json={"id": "docs"}), 409, "BucketAlreadyExists")
    updated = service.put(f"{BUCKETS}/docs", json={"public": True, "allowed_mime_types": ["text/*"]})
    assert updated.json == {"message": "Successfully updated"}
    assert service.get(f"{BUCKETS}/docs").json["allowed_mime_types"] == ["text/*"]
    service.post("/storage/v1/object/docs/a.txt", data=b"x", headers={"Content-Type": "text/plain"})
    assert_storage_error(service.delete(f"{BUCKETS}/docs"), 409, "ResourceNotEmpty")
    assert service.post(f"{BUCKETS}/docs/empty").json == {"message": "Successfully emptied"}
    assert service.delete(f"{BUCKETS}/docs").json == {"message": "Successfully deleted"}
    assert_storage_error(service.get(f"{BUCKETS}/docs"), 404, "NoSuchBucket")


@pytest.mark.parametrize(
    "body",
    [{"id": "../x"}, {"id": ""}, {"id": "a" * 64}, {"id": 5}, {"id": "ok", "public": "yes"},
     {"id": "ok", "file_size_limit": "lots"}, {"id": "ok", "allowed_mime_types": "image/*"},
     {"id": "ok", "allowed_mime_types": ["not a type"]}],
)  # fmt: skip
def test_bad_bucket_bodies_are_400s(service, body):
    assert_storage_error(service.post(BUCKETS, json=body), 400)


@pytest.mark.parametrize(
    "limit, size",
    [("20mb", 20_000_000), ("1GB", 1_000_000_000), ("500kb", 500_000), ("3B", 3), ("1.5GB", 1_500_000_000),
     ("1.1mb", 1_100_000), ("1234kb", 1_230_000), (1048576, 1048576), (0, None)],
)  # fmt: skip
def test_sizes_are_read_as_supabase_reads_them(service, limit, size):
    """Decimal units, the number kept to three significant digits (Supabase's parseFileSizeToBytes)."""
    assert service.post(BUCKETS, json={"id": "sized", "file_size_limit": limit}).status_code == 200
    assert service.get(f"{BUCKETS}/sized").json["file_size_limit"] == size
    assert service.put(f"{BUCKETS}/sized", json={"file_size_limit": limit}).status_code == 200


@pytest.mark.parametrize("limit", ["5 MB", "5MiB", "1TB", ".5mb", "5m", "mb", "-1kb", "1e3kb", "２mb", ""])
def test_sizes_supabase_refuses_are_400s(service, limit):
    assert_storage_error(service.post(BUCKETS, json={"id": "sized", "file_size_limit": limit}), 400)


def test_a_declaration_that_cannot_work_stops_the_start(tmp_path, database_url):
    for text, says in (
        ('[buckets.a]\nselect = "everyone"', "select"),
        ('[buckets.a]\npublic = "yes"', "public"),
        ('[buckets."../x"]', "bucket name"),
        ('[buckets.a]\nfile_size_limit = "big"', "file_size_limit"),
        ('[buckets.a]\nfile_size_limit = "999999999999999TB"', "file_size_limit"),
        ('[buckets.a.policies]\nupsert = "true"', "unknown key 'upsert'"),
    ):
        path = tmp_path / "tables.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=says):
            create_app({"DATABASE_URL": database_url, "JWT_SECRET": SECRET, "TABLES_CONFIG": str(path)})


def test_tables_and_buckets_share_tables_toml(make_app, tmp_path, service_key):
    path = tmp_path / "tables.toml"
    path.write_text('[tables.missing]\nselect = "anon"\n\n[buckets.files]\npublic = true\n')
    app = make_app(TABLES_CONFIG=str(path))
    assert [bucket["id"] for bucket in Api(app, service_key).get(BUCKETS).json] == ["files"]
    assert set(app.extensions["minibase"].tables_toml.tables) == {"missing"}  # the table API read its part
