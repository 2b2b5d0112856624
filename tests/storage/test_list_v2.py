"""POST /object/list-v2/{bucket} on both databases: cursor pages as Supabase Storage answers them
(hasNext, nextCursor, folders, objects), the v1 list's rules and row policies in its SQL, and
what a client may forge: a prefix with wildcards, a cursor into another user's folder."""

import base64

import pytest

from support import assert_storage_error

OBJECTS = "/storage/v1/object"
NAMES = ("b.txt", "a.txt", "a/one.txt", "a/deep/x.txt", "a.b/y.txt", "Cat.txt", "docs/z.txt", "docs/y.txt")


def upload(client, path, token=None, data=b"hello"):
    answer = client.post(f"{OBJECTS}/{path}", data=data, token=token, headers={"Content-Type": "text/plain"})
    assert answer.status_code == 200, answer.json
    return answer


def list_v2(client, bucket="locked", token=None, **body):
    answer = client.post(f"{OBJECTS}/list-v2/{bucket}", json=body, token=token)
    assert answer.status_code == 200, answer.json
    return answer.json


def walk(client, bucket="locked", token=None, **body):
    """Every page from the first, each the set of names it shows (a folder's ends with "/")."""
    pages, cursor = [], None
    while True:
        page = list_v2(client, bucket, token, **body, **({"cursor": cursor} if cursor else {}))
        pages.append({entry["name"] for entry in page["folders"] + page["objects"]})
        if not page["hasNext"]:
            assert "nextCursor" not in page
            return pages
        cursor = page["nextCursor"]


def chunks(names, size):
    return [set(names[at : at + size]) for at in range(0, len(names), size)]


@pytest.fixture
def stocked(service):
    for name in NAMES:
        upload(service, f"locked/{name}")
    return service


def test_a_delimited_listing_in_pages(stocked):
    first = list_v2(stocked, with_delimiter=True, limit=3)
    assert first["hasNext"] is True and first["nextCursorKey"] == "a.txt"
    assert [o["name"] for o in first["objects"]] == ["Cat.txt", "a.txt"]
    assert first["folders"] == [
        {"key": "a.b", "name": "a.b/", "id": None, "updated_at": None, "created_at": None,
         "last_accessed_at": None, "metadata": None}
    ]  # fmt: skip
    listed = first["objects"][0]
    assert listed["key"] == "Cat.txt" and listed["id"] and listed["metadata"]["size"] == 5
    assert listed["metadata"]["eTag"] == '"5d41402abc4b2a76b9719d911017c592"'
    # A folder sorts where its first object would: "a.b/" after "a.txt", "a/" after both.
    by_name = ["Cat.txt", "a.b/", "a.txt", "a/", "b.txt", "docs/"]
    for limit in (1, 2, 4, 1000):
        assert walk(stocked, with_delimiter=True, limit=limit) == chunks(by_name, limit)
    backwards = walk(stocked, with_delimiter=True, limit=4, sortBy={"column": "name", "order": "desc"})
    assert backwards == chunks(by_name[::-1], 4)


def test_a_prefix_is_text_and_keys_are_at_its_depth(stocked):
    under_a = list_v2(stocked, prefix="a/", with_delimiter=True)
    assert [(f["key"], f["name"]) for f in under_a["folders"]] == [("deep", "a/deep/")]
    assert [(o["key"], o["name"]) for o in under_a["objects"]] == [("one.txt", "a/one.txt")]
    partial = list_v2(stocked, prefix="a", with_delimiter=True)  # "a" matches "a.b/", "a.txt" and "a/"
    assert [f["name"] for f in partial["folders"]] == ["a.b/", "a/"]
    assert [o["name"] for o in partial["objects"]] == ["a.txt"]
    assert list_v2(stocked, prefix="cat")["objects"] == []  # case counts, on both databases


def test_without_a_delimiter_every_object_under_the_prefix(stocked):
    flat = list_v2(stocked, prefix="a")
    assert flat["folders"] == [] and "key" not in flat["objects"][0]
    assert [o["name"] for o in flat["objects"]] == ["a.b/y.txt", "a.txt", "a/deep/x.txt", "a/one.txt"]
    assert walk(stocked, limit=3) == chunks(sorted(NAMES), 3)


def test_pages_sorted_by_a_time(service, monkeypatch):
    from storage import clock

    moments = iter(range(1, 60))
    real_now = clock.now
    monkeypatch.setattr(clock, "now", lambda: real_now().replace(microsecond=0, second=next(moments)))
    uploaded = ["zz.txt", "bb.txt", "f/1.txt", "xx.txt", "aa.txt", "f/2.txt", "cc.txt"]
    for name in uploaded:
        upload(service, f"locked/{name}")
    oldest_first = {"column": "created_at", "order": "asc"}
    assert walk(service, limit=2, sortBy=oldest_first) == chunks(uploaded, 2)
    assert walk(service, limit=3, sortBy={"column": "updated_at", "order": "desc"}) == chunks(
        uploaded[::-1], 3
    )
    # A folder is as old as its first object, and is given that time, as Supabase gives it.
    newest_first = {"column": "created_at", "order": "desc"}
    delimited = walk(service, limit=2, with_delimiter=True, sortBy=newest_first)
    assert delimited == chunks(["cc.txt", "aa.txt", "xx.txt", "f/", "bb.txt", "zz.txt"], 2)
    folder = list_v2(service, with_delimiter=True, sortBy=newest_first)["folders"][0]
    first = list_v2(service, prefix="f/1.txt")["objects"][0]
    assert folder["created_at"] == folder["updated_at"] == first["created_at"]


def test_objects_uploaded_within_a_second_keep_their_order(service):
    """Times to the millisecond, as Supabase keeps them: storage-js's own paging test uploads eight
    objects in a row and pages them by created_at."""
    uploaded = ["zz", "bb", "xx", "ww", "cc", "aa", "yy", "oo"]
    for name in uploaded:
        upload(service, f"locked/t/{name}")
    oldest_first = {"column": "created_at", "order": "asc"}
    assert walk(service, prefix="t/", limit=2, sortBy=oldest_first) == chunks([f"t/{n}" for n in uploaded], 2)
    newest = list_v2(service, prefix="t/", limit=1, sortBy={"column": "created_at", "order": "desc"})
    assert newest["objects"][0]["name"] == "t/oo"
    info = service.get(f"{OBJECTS}/info/locked/t/oo").json
    assert info["created_at"] == newest["objects"][0]["created_at"]


def test_another_users_objects_never_show(api, user_token):
    ann, bob = user_token("ann@example.com"), user_token("bob@example.com")
    upload(api, "private/ann/secret.txt", ann)
    upload(api, "private/ann/deep/more.txt", ann)
    upload(api, "private/bob.txt", bob)
    mine = list_v2(api, "private", ann, with_delimiter=True)
    assert [f["name"] for f in mine["folders"]] == ["ann/"] and mine["objects"] == []
    for body in (
        {},
        {"with_delimiter": True},
        {"prefix": "ann/"},
        {"prefix": "ann/", "with_delimiter": True},
    ):
        seen = list_v2(api, "private", bob, **body)
        assert [o["name"] for o in seen["objects"]] in ([], ["bob.txt"]) and seen["folders"] == []
        assert list_v2(api, "private", **body) == {"hasNext": False, "folders": [], "objects": []}  # anon
    # A forged cursor starts the page elsewhere; it shows nothing more.
    for after in ("", "ann", "ann/", "ann/deep/", "\u0000"):
        cursor = base64.b64encode(f"l:{after}\no:asc\nc:name".encode()).decode()
        seen = list_v2(api, "private", bob, cursor=cursor, with_delimiter=True)
        assert seen["folders"] == [] and {o["name"] for o in seen["objects"]} <= {"bob.txt"}
    assert list_v2(api, "locked", bob) == {"hasNext": False, "folders": [], "objects": []}


@pytest.mark.parametrize("prefix", ["%", "_", "..", "a%", "%/", "_.txt", "\\", "'", "a/../"])
def test_wildcards_in_a_prefix_are_only_text(service, prefix):
    for name in ("abc.txt", "a/one.txt", "_x.txt", "%y.txt", "..z.txt"):
        upload(service, f"locked/{name}")
    listed = list_v2(service, prefix=prefix)
    assert [o["name"] for o in listed["objects"]] == [n for n in sorted(
        ("abc.txt", "a/one.txt", "_x.txt", "%y.txt", "..z.txt")) if n.startswith(prefix)]  # fmt: skip


def cursor_of(text):
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@pytest.mark.parametrize(
    "body",
    [{"limit": 0}, {"limit": "5"}, {"limit": 1.5}, {"limit": True}, {"prefix": 5}, {"with_delimiter": "yes"},
     {"sortBy": {"column": "size"}}, {"sortBy": {}}, {"sortBy": {"column": "name", "order": "DESC"}},
     {"sortBy": "name"}, {"prefix": "x" * 513}],
)  # fmt: skip
def test_bodies_supabase_refuses_are_400s(service, body):
    assert_storage_error(service.post(f"{OBJECTS}/list-v2/locked", json=body), 400, "InvalidRequest")


@pytest.mark.parametrize(
    "cursor",
    ["!!!", "bm90IGEgY3Vyc29y", cursor_of("x:y"), cursor_of("l:a\nc:size"), cursor_of("l:a\no:sideways"),
     cursor_of("l:a\nc:created_at\na:yesterday"), cursor_of("l:a\nc:created_at"), cursor_of("o:asc"),
     cursor_of("l:a") + "A" * 5000, 5, base64.b64encode(b"l:\xff").decode()],
)  # fmt: skip
def test_a_forged_cursor_is_a_400(service, cursor):
    answer = service.post(f"{OBJECTS}/list-v2/locked", json={"cursor": cursor})
    assert_storage_error(answer, 400, "InvalidParameter")
    assert answer.json["message"] == "Invalid Parameter continuation token"


def test_a_missing_bucket_is_a_404(service):
    assert_storage_error(service.post(f"{OBJECTS}/list-v2/nope", json={}), 404, "NoSuchBucket")
    assert_storage_error(
        service.post(f"{OBJECTS}/list-v2/locked", data="[", content_type="application/json"), 400
    )
