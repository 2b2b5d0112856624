"""Row policies over a bucket's objects ([buckets.NAME.policies]), on SQLite and MariaDB: each user
writes and reads under a folder named by their id, everyone signed in reads shared/, and nothing a
policy refuses leaves a row or a file behind."""

import pytest

from support import assert_storage_error
from variables import ConfigError

OBJECTS = "/storage/v1/object"


def own_folder(backend):
    """The example of the docs: the object's name starts with the caller's id and a slash."""
    return "name LIKE CONCAT(:uid, '/%')" if backend == "mysql" else "name LIKE :uid || '/%'"


@pytest.fixture
def tables_config(tmp_path, backend):
    mine = own_folder(backend)
    path = tmp_path / "tables.toml"
    path.write_text(f"""
[buckets.docs]
select = "authenticated"
insert = "authenticated"
update = "authenticated"
delete = "authenticated"

[buckets.docs.policies]
select = "{mine} OR name LIKE 'shared/%'"
insert = "{mine}"
update = "{mine}"
delete = "{mine}"
""")
    return path


@pytest.fixture
def people(api):
    """Two signed-up users: name -> (user id, access token)."""
    found = {}
    for name in ("ann", "bob"):
        session = api.sign_up(email=f"{name}@example.com")
        found[name] = (session["user"]["id"], session["access_token"])
    return found


def put(client, path, token=None, data=b"hello", **headers):
    return client.post(
        f"{OBJECTS}/docs/{path}", data=data, token=token, headers={"Content-Type": "text/plain", **headers}
    )


def names(client, token, prefix=""):
    listed = client.post(f"{OBJECTS}/list/docs", json={"prefix": prefix}, token=token)
    assert listed.status_code == 200, listed.json
    return sorted(entry["name"] for entry in listed.json)


def stored_files(root):
    return sorted(path.name for path in (root / "objects").rglob("*") if path.is_file())


def test_each_user_writes_only_under_their_folder(api, people, storage_root):
    (ann, ann_token), (bob, _) = people["ann"], people["bob"]
    assert put(api, f"{ann}/notes.txt", ann_token).status_code == 200
    before = stored_files(storage_root)
    refused = assert_storage_error(put(api, f"{bob}/planted.txt", ann_token), 403, "AccessDenied")
    assert refused["message"] == "new row violates row-level security policy"
    assert_storage_error(put(api, "shared/by-ann.txt", ann_token), 403, "AccessDenied")
    assert stored_files(storage_root) == before  # a refused upload keeps no bytes


def test_a_policy_hides_objects_as_if_missing(api, service, people):
    (ann, ann_token), (_, bob_token) = people["ann"], people["bob"]
    put(api, f"{ann}/diary.txt", ann_token, b"dear diary")
    put(service, "shared/rules.txt", data=b"be kind")
    assert api.get(f"{OBJECTS}/docs/{ann}/diary.txt", token=ann_token).data == b"dear diary"
    assert_storage_error(api.get(f"{OBJECTS}/docs/{ann}/diary.txt", token=bob_token), 404, "NoSuchKey")
    assert_storage_error(api.get(f"{OBJECTS}/info/docs/{ann}/diary.txt", token=bob_token), 404)
    assert api.get(f"{OBJECTS}/docs/shared/rules.txt", token=bob_token).data == b"be kind"
    assert names(api, bob_token, f"{ann}/") == []
    assert names(api, ann_token, f"{ann}/") == ["diary.txt"]
    assert names(api, bob_token, "shared/") == ["rules.txt"]
    for token, seen in ((bob_token, (["shared/"], [])), (ann_token, ([f"{ann}/", "shared/"], []))):
        page = api.post(f"{OBJECTS}/list-v2/docs", json={"with_delimiter": True}, token=token).json
        assert ([f["name"] for f in page["folders"]], page["objects"]) == seen
    flat = api.post(f"{OBJECTS}/list-v2/docs", json={"prefix": f"{ann}/"}, token=bob_token).json
    assert flat == {"hasNext": False, "folders": [], "objects": []}
    signed = api.post(f"{OBJECTS}/sign/docs/{ann}/diary.txt", json={"expiresIn": 60}, token=bob_token)
    assert_storage_error(signed, 404)


def test_a_policy_keeps_others_from_replacing_moving_or_removing(api, people):
    (ann, ann_token), (bob, bob_token) = people["ann"], people["bob"]
    put(api, f"{ann}/keep.txt", ann_token, b"original")
    replaced = api.put(
        f"{OBJECTS}/docs/{ann}/keep.txt",
        data=b"vandal",
        token=bob_token,
        headers={"Content-Type": "text/plain"},
    )
    assert_storage_error(replaced, 404)
    assert_storage_error(put(api, f"{ann}/keep.txt", bob_token, b"vandal", **{"x-upsert": "true"}), 403)
    moved = api.post(
        f"{OBJECTS}/move",
        json={"bucketId": "docs", "sourceKey": f"{ann}/keep.txt", "destinationKey": f"{bob}/taken.txt"},
        token=bob_token,
    )
    assert_storage_error(moved, 404)
    removed = api.delete(f"{OBJECTS}/docs", json={"prefixes": [f"{ann}/keep.txt"]}, token=bob_token)
    assert removed.status_code == 200 and removed.json == []
    assert api.get(f"{OBJECTS}/docs/{ann}/keep.txt", token=ann_token).data == b"original"


def test_the_update_policy_checks_where_an_object_moves_to(api, people):
    (ann, ann_token), (bob, bob_token) = people["ann"], people["bob"]
    put(api, f"{ann}/gift.txt", ann_token, b"for bob")
    moved = api.post(
        f"{OBJECTS}/move",
        json={"bucketId": "docs", "sourceKey": f"{ann}/gift.txt", "destinationKey": f"{bob}/gift.txt"},
        token=ann_token,
    )
    assert_storage_error(moved, 403, "AccessDenied")
    assert api.get(f"{OBJECTS}/docs/{ann}/gift.txt", token=ann_token).data == b"for bob"
    assert_storage_error(api.get(f"{OBJECTS}/docs/{bob}/gift.txt", token=bob_token), 404)
    within = api.post(
        f"{OBJECTS}/move",
        json={"bucketId": "docs", "sourceKey": f"{ann}/gift.txt", "destinationKey": f"{ann}/kept.txt"},
        token=ann_token,
    )
    assert within.status_code == 200, within.json


def test_a_signed_upload_url_is_held_to_the_insert_policy_when_made(api, browser, people):
    (ann, ann_token), (bob, _) = people["ann"], people["bob"]
    refused = api.post(f"{OBJECTS}/upload/sign/docs/{bob}/planted.txt", token=ann_token)
    assert_storage_error(refused, 403, "AccessDenied")
    made = api.post(f"{OBJECTS}/upload/sign/docs/{ann}/later.txt", token=ann_token)
    assert made.status_code == 200, made.json
    done = browser.put(f"{OBJECTS}{made.json['url'].removeprefix('/object')}", data=b"x")
    assert done.status_code == 200, done.json
    assert names(api, ann_token, f"{ann}/") == ["later.txt"]


def test_the_service_key_passes_the_policies(service, people):
    bob = people["bob"][0]
    assert put(service, f"{bob}/from-the-server.txt").status_code == 200
    assert names(service, None, f"{bob}/") == ["from-the-server.txt"]


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("nonexistent_column = 1", "[buckets.docs.policies]: select does not compile"),
        ("owner = :password", "select uses :password"),
    ],
)
def test_a_policy_that_cannot_work_stops_the_start(make_app, tmp_path, policy, said):
    path = tmp_path / "bad.toml"
    path.write_text(f'[buckets.docs]\nselect = "anon"\n\n[buckets.docs.policies]\nselect = "{policy}"\n')
    with pytest.raises(ConfigError) as refused:
        make_app(TABLES_CONFIG=str(path))
    assert said in str(refused.value)
