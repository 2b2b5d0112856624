"""POST, PATCH and DELETE on /rest/v1/{table}: every form, upserts, transactions, and
what the database refuses."""

import threading

import pytest
import sqlalchemy as sa

from support import assert_rest_error

REPRESENTATION = {"Prefer": "return=representation"}


def test_insert_one_returns_201_and_an_empty_body(rest):
    response = rest.anon.post("/rest/v1/items", json={"name": "Fig", "price": 4.5})
    assert response.status_code == 201 and response.get_data() == b""
    assert rest.rows("items")[-1]["name"] == "Fig" and len(rest.rows("items")) == 6


def test_insert_representation_fills_ids_and_defaults(rest):
    response = rest.anon.post(
        "/rest/v1/children",
        json=[{"item_id": 1}, {"item_id": 2}],
        headers=REPRESENTATION,
    )
    assert response.status_code == 201
    assert response.json == [
        {"id": 1, "item_id": 1, "label": "child"},
        {"id": 2, "item_id": 2, "label": "child"},
    ]
    again = rest.anon.post("/rest/v1/items", json={"name": "Fig"}, headers=REPRESENTATION)
    assert again.json == [
        {"id": 6, "name": "Fig", "price": None, "qty": None, "active": None, "created": None,
         "code": None, "note": None}
    ]  # fmt: skip


def test_insert_representation_with_select_and_object(rest):
    response = rest.anon.post(
        "/rest/v1/items?select=id,label:name",
        json={"name": "Fig", "created": "2024-05-06T07:08:09Z", "active": "true"},
        headers={**REPRESENTATION, "Accept": "application/vnd.pgrst.object+json"},
    )
    assert response.status_code == 201 and response.json == {"id": 6, "label": "Fig"}
    stored = rest.rows("items")[-1]
    assert stored["created"].isoformat() == "2024-05-06T07:08:09" and stored["active"] is True


def test_object_accept_on_a_bulk_insert_is_a_406_and_stores_nothing(rest):
    response = rest.anon.post(
        "/rest/v1/items",
        json=[{"name": "a"}, {"name": "b"}],
        headers={**REPRESENTATION, "Accept": "application/vnd.pgrst.object+json"},
    )
    assert_rest_error(response, 406)
    assert len(rest.rows("items")) == 5


def test_headers_only_gives_the_location(rest):
    response = rest.anon.post(
        "/rest/v1/items", json={"name": "Fig"}, headers={"Prefer": "return=headers-only"}
    )
    assert response.status_code == 201 and response.get_data() == b""
    assert response.headers["Location"] == "/items?id=eq.6"
    assert response.headers["Preference-Applied"] == "return=headers-only"


def test_bulk_insert(rest):
    rows = [{"name": f"n{i}", "qty": i} for i in range(50)]
    assert rest.anon.post("/rest/v1/items", json=rows).status_code == 201
    assert [row["qty"] for row in rest.rows("items")[5:]] == list(range(50))


def test_empty_object_inserts_defaults_and_empty_array_inserts_nothing(rest):
    response = rest.anon.post("/rest/v1/pairs", json=[], headers=REPRESENTATION)
    assert response.status_code == 201 and response.json == []
    response = rest.service.post("/rest/v1/inbox", json={}, headers=REPRESENTATION)
    assert response.status_code == 201 and response.json == [{"id": 1, "message": None}]
    assert rest.service.post("/rest/v1/inbox", json=[{}, {}]).status_code == 201
    assert [row["id"] for row in rest.rows("inbox")] == [1, 2, 3]


def test_a_table_without_a_primary_key(rest):
    response = rest.anon.post(
        "/rest/v1/events",
        json=[{"kind": "a", "amount": 1}, {"kind": "b", "amount": None}],
        headers=REPRESENTATION,
    )
    assert response.status_code == 201
    assert response.json == [
        {"kind": "a", "amount": 1, "source": "api"},
        {"kind": "b", "amount": None, "source": "api"},
    ]
    patched = rest.anon.patch("/rest/v1/events?kind=eq.a", json={"amount": 5}, headers=REPRESENTATION)
    assert patched.json == [{"kind": "a", "amount": 5, "source": "api"}]
    deleted = rest.anon.delete("/rest/v1/events?amount=is.null&select=kind", headers=REPRESENTATION)
    assert deleted.json == [{"kind": "b"}]
    assert rest.anon.get("/rest/v1/events").json == [{"kind": "a", "amount": 5, "source": "api"}]
    assert_rest_error(
        rest.anon.post(
            "/rest/v1/events", json={"kind": "c"}, headers={"Prefer": "resolution=merge-duplicates"}
        ),
        400,
    )


def test_a_failing_row_in_a_bulk_insert_stores_nothing(rest):
    rows = [{"name": "ok1", "code": "N1"}, {"name": "ok2", "code": "A1"}, {"name": "ok3", "code": "N3"}]
    assert_rest_error(rest.anon.post("/rest/v1/items", json=rows), 409)
    rows = [{"name": "ok1"}, {"name": None}]
    assert_rest_error(rest.anon.post("/rest/v1/items", json=rows, headers=REPRESENTATION), 400)
    rows = [{"name": "ok1", "qty": 1}, {"name": "ok2", "qty": "many"}]
    assert_rest_error(rest.anon.post("/rest/v1/items", json=rows), 400)
    assert len(rest.rows("items")) == 5


def test_keys_must_match_across_a_bulk_insert(rest):
    body = assert_rest_error(
        rest.anon.post("/rest/v1/items", json=[{"name": "a"}, {"name": "b", "qty": 1}]), 400
    )
    assert "keys must match" in body["message"]
    assert len(rest.rows("items")) == 5


def test_columns_parameter_restricts_the_inserted_keys(rest):
    response = rest.anon.post(
        "/rest/v1/children?columns=item_id,label",
        json=[{"item_id": 1, "label": "x", "ignored": 1}, {"item_id": 2}],
        headers={"Prefer": "return=representation,missing=default"},
    )
    assert response.status_code == 201
    assert [(r["item_id"], r["label"]) for r in response.json] == [(1, "x"), (2, "child")]
    missing_null = rest.anon.post("/rest/v1/children?columns=item_id,label", json=[{"item_id": 1}])
    assert_rest_error(missing_null, 400)
    assert_rest_error(rest.anon.post("/rest/v1/children?columns=item_id,nope", json=[{"item_id": 1}]), 400)


def test_upsert_merge_duplicates_on_the_primary_key(rest):
    response = rest.anon.post(
        "/rest/v1/items",
        json=[{"id": 1, "name": "Apple 2"}, {"id": 9, "name": "Kiwi"}],
        headers={"Prefer": "return=representation,resolution=merge-duplicates"},
    )
    assert response.status_code == 201
    assert [(r["id"], r["name"], r["qty"]) for r in response.json] == [(1, "Apple 2", 10), (9, "Kiwi", None)]
    assert response.headers["Preference-Applied"] == "resolution=merge-duplicates, return=representation"
    assert [r["name"] for r in rest.rows("items")] == [
        "Apple 2",
        "apple pie",
        "Banana",
        "cherry_tart",
        "Date",
        "Kiwi",
    ]


def test_an_upsert_that_only_merges_answers_200_as_postgrest(rest):
    """PostgREST: 201 when the upsert inserted a row, 200 when it merged every row into one that
    existed, the merged rows in the body either way."""
    headers = {"Prefer": "return=representation,resolution=merge-duplicates,count=exact"}
    merged = rest.anon.post(
        "/rest/v1/items", json=[{"id": 1, "name": "A"}, {"id": 2, "name": "B"}], headers=headers
    )
    assert merged.status_code == 200, merged.json
    assert [(r["id"], r["name"], r["qty"]) for r in merged.json] == [(1, "A", 10), (2, "B", 0)]
    assert merged.headers["Content-Range"] == "*/2"
    assert (
        merged.headers["Preference-Applied"]
        == "resolution=merge-duplicates, return=representation, count=exact"
    )
    quiet = rest.anon.post(
        "/rest/v1/items", json={"id": 1, "name": "C"}, headers={"Prefer": "resolution=merge-duplicates"}
    )
    assert quiet.status_code == 200 and quiet.get_data() == b""
    inserted = rest.anon.post("/rest/v1/items", json={"id": 30, "name": "D"}, headers=headers)
    assert inserted.status_code == 201 and inserted.json[0]["id"] == 30
    ignored = rest.anon.post(
        "/rest/v1/items",
        json={"id": 1, "name": "E"},
        headers={"Prefer": "return=representation,resolution=ignore-duplicates"},
    )
    assert ignored.status_code == 201 and ignored.json == []
    assert [r["name"] for r in rest.rows("items")][:2] == ["C", "B"]


def test_missing_default_lets_bulk_rows_leave_out_keys(rest):
    """Prefer: missing=default without ?columns=: each row's missing keys take the column default
    (label's is "child"), not NULL; without the preference, differing keys stay a 400."""
    rows = [{"item_id": 1, "label": "x"}, {"item_id": 2}]
    response = rest.anon.post(
        "/rest/v1/children", json=rows, headers={"Prefer": "return=representation,missing=default"}
    )
    assert response.status_code == 201, response.json
    assert [(r["item_id"], r["label"]) for r in response.json] == [(1, "x"), (2, "child")]
    assert "missing=default" in response.headers["Preference-Applied"]
    assert_rest_error(rest.anon.post("/rest/v1/children", json=rows), 400)
    assert len(rest.rows("children")) == 2


def test_upsert_ignore_duplicates_keeps_the_existing_row(rest):
    response = rest.anon.post(
        "/rest/v1/items",
        json=[{"id": 1, "name": "Apple 2"}, {"id": 9, "name": "Kiwi"}],
        headers={"Prefer": "return=representation,resolution=ignore-duplicates"},
    )
    assert response.status_code == 201 and [r["id"] for r in response.json] == [9]
    assert rest.rows("items")[0]["name"] == "Apple"


def test_upsert_on_conflict_with_a_unique_column(rest):
    prefer = {"Prefer": "return=representation,resolution=merge-duplicates"}
    response = rest.anon.post(
        "/rest/v1/items?on_conflict=code", json={"code": "A2", "name": "Pie", "qty": 7}, headers=prefer
    )
    assert response.status_code == 200 and response.json[0]["id"] == 2 and response.json[0]["qty"] == 7
    ignored = rest.anon.post(
        "/rest/v1/items?on_conflict=code",
        json={"code": "A2", "name": "Other"},
        headers={"Prefer": "resolution=ignore-duplicates"},
    )
    assert ignored.status_code == 201 and rest.rows("items")[1]["name"] == "Pie"
    assert len(rest.rows("items")) == 5


def test_upsert_on_a_composite_key(rest):
    prefer = {"Prefer": "return=representation,resolution=merge-duplicates"}
    rest.anon.post("/rest/v1/pairs", json=[{"a": 1, "b": 1, "value": "x"}, {"a": 1, "b": 2, "value": "y"}])
    response = rest.anon.post(
        "/rest/v1/pairs?on_conflict=a,b",
        json=[{"a": 1, "b": 2, "value": "z"}, {"a": 2, "b": 1, "value": None}],
        headers=prefer,
    )
    assert response.json == [{"a": 1, "b": 2, "value": "z"}, {"a": 2, "b": 1, "value": None}]
    assert [(r["a"], r["b"], r["value"]) for r in rest.rows("pairs", "a,b")] == [
        (1, 1, "x"), (1, 2, "z"), (2, 1, None)
    ]  # fmt: skip


@pytest.mark.parametrize("on_conflict", ["name", "a", "id,name", "nope"])
def test_upsert_on_a_column_set_without_a_unique_constraint_is_a_400(rest, on_conflict):
    response = rest.anon.post(
        f"/rest/v1/items?on_conflict={on_conflict}",
        json={"name": "x"},
        headers={"Prefer": "resolution=merge-duplicates"},
    )
    assert_rest_error(response, 400)


def test_plain_insert_of_a_duplicate_is_a_409(rest):
    body = assert_rest_error(rest.anon.post("/rest/v1/items", json={"id": 1, "name": "again"}), 409)
    assert body["message"] == 'duplicate key value violates unique constraint "items_pkey"'
    # The key the client sent, and nothing of the row already stored.
    assert body["details"] == "Key (id)=(1) already exists."
    assert "Apple" not in str(body) and "A1" not in str(body)


def test_foreign_key_violations_are_409(rest):
    assert_rest_error(rest.anon.post("/rest/v1/children", json={"item_id": 999}), 409)
    rest.anon.post("/rest/v1/children", json={"item_id": 1})
    assert_rest_error(rest.anon.delete("/rest/v1/items?id=eq.1"), 409)
    assert len(rest.rows("items")) == 5


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": None}, 'null value in column "name" violates not-null constraint'),
        ({"price": 1}, "not-null constraint"),
        ({"name": "x", "qty": -1}, "check constraint"),
    ],
)
def test_not_null_and_check_violations_are_400(rest, body, message):
    response = assert_rest_error(rest.anon.post("/rest/v1/items", json=body), 400)
    assert message in response["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "qty": "abc"},
        {"name": "x", "qty": "1.5"},
        {"name": "x", "qty": 1.5},
        {"name": "x", "qty": True},
        {"name": "x", "qty": [1]},
        {"name": "x", "qty": {"a": 1}},
        {"name": "x", "qty": 2**70},
        {"name": "x", "price": "cheap"},
        {"name": "x", "active": "maybe"},
        {"name": "x", "active": 7},
        {"name": "x", "created": "yesterday"},
        {"name": "x", "created": 5},
        {"name": {"nested": True}},
        {"name": True},
        {"name": "x" * 51},
    ],
)
def test_values_of_the_wrong_type_are_400_on_both_backends(rest_reads, body):
    response = assert_rest_error(rest_reads.anon.post("/rest/v1/items", json=body), 400)
    assert '"' in response["message"] and len(rest_reads.rows("items")) == 5


def test_values_are_converted_to_the_column_type(rest):
    body = {"name": 12, "qty": "7", "price": "2.5", "active": "false", "created": "2024-01-02"}
    response = rest.anon.post(
        "/rest/v1/items?select=name,qty,price,active,created", json=body, headers=REPRESENTATION
    )
    assert response.json == [
        {"name": "12", "qty": 7, "price": 2.5, "active": False, "created": "2024-01-02T00:00:00"}
    ]


def test_unknown_body_keys_are_a_400_naming_them(rest):
    body = assert_rest_error(rest.anon.post("/rest/v1/items", json={"name": "x", "colour": "red"}), 400)
    assert body["message"] == "Could not find the 'colour' column of 'items' in the schema cache"
    body = assert_rest_error(rest.anon.patch("/rest/v1/items?id=eq.1", json={"nmae": "x"}), 400)
    assert body["message"] == "Could not find the 'nmae' column of 'items' in the schema cache"


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"nope", b"null", b"42", b'"text"', b"[1, 2]", b'[{"name": "a"}, 3]', b"\xff\xfe",
     b"[" * 100000 + b"]" * 100000, b'{"name": NaN}', b'{"name": "x", "price": Infinity}',
     b'{"name": "x", "price": 1e999}', b'{"name": "x", "qty": -1E400}'],
)  # fmt: skip
def test_bodies_that_are_not_json_objects_are_400(rest_reads, data):
    response = rest_reads.anon.post("/rest/v1/items", data=data, headers={"Content-Type": "application/json"})
    assert_rest_error(response, 400)
    assert len(rest_reads.rows("items")) == 5


@pytest.mark.parametrize("data", [b"[]", b'[{"name": "a"}]', b"{}", b"null"])
def test_patch_bodies_must_be_a_non_empty_object(rest, data):
    response = rest.anon.patch(
        "/rest/v1/items?id=eq.1", data=data, headers={"Content-Type": "application/json"}
    )
    assert_rest_error(response, 400)


def test_body_over_one_megabyte_is_a_413(rest):
    rows = [{"name": "x" * 40, "note": "y" * 1000} for _ in range(1100)]
    assert_rest_error(rest.anon.post("/rest/v1/items", json=rows), 413)
    assert len(rest.rows("items")) == 5


def test_patch(rest):
    response = rest.anon.patch("/rest/v1/items?name=ilike.apple*", json={"qty": 42})
    assert response.status_code == 204 and response.get_data() == b""
    assert [row["qty"] for row in rest.rows("items")] == [42, 42, 5, None, 3]


def test_patch_representation_returns_the_changed_rows(rest):
    response = rest.anon.patch(
        "/rest/v1/items?or=(id.eq.2,id.eq.4)&select=id,qty,name",
        json={"qty": 1, "name": "new"},
        headers=REPRESENTATION,
    )
    assert response.status_code == 200
    assert response.json == [{"id": 2, "qty": 1, "name": "new"}, {"id": 4, "qty": 1, "name": "new"}]
    nothing = rest.anon.patch("/rest/v1/items?id=eq.99", json={"qty": 1}, headers=REPRESENTATION)
    assert nothing.status_code == 200 and nothing.json == []


def test_patch_that_changes_the_filtered_column_and_the_key(rest):
    response = rest.anon.patch("/rest/v1/items?qty=eq.0", json={"qty": 9}, headers=REPRESENTATION)
    assert [(r["id"], r["qty"]) for r in response.json] == [(2, 9)]
    moved = rest.anon.patch("/rest/v1/items?id=eq.5", json={"id": 50}, headers=REPRESENTATION)
    assert [r["id"] for r in moved.json] == [50]


def test_patch_with_object_accept_needs_exactly_one_row(rest):
    accept = {**REPRESENTATION, "Accept": "application/vnd.pgrst.object+json"}
    one = rest.anon.patch("/rest/v1/items?id=eq.1", json={"qty": 1}, headers=accept)
    assert one.status_code == 200 and one.json["qty"] == 1
    assert_rest_error(rest.anon.patch("/rest/v1/items?id=gt.1", json={"qty": 1}, headers=accept), 406)
    assert [row["qty"] for row in rest.rows("items")] == [1, 0, 5, None, 3]


def test_patch_that_breaks_a_constraint_changes_nothing(rest):
    assert_rest_error(rest.anon.patch("/rest/v1/items?id=gte.1", json={"code": "A1"}), 409)
    assert_rest_error(rest.anon.patch("/rest/v1/items?id=eq.1", json={"name": None}), 400)
    assert_rest_error(rest.anon.patch("/rest/v1/items?id=eq.1", json={"qty": -5}), 400)
    assert rest.rows("items")[0]["code"] == "A1" and rest.rows("items")[1]["code"] == "A2"


def test_delete(rest):
    response = rest.anon.delete("/rest/v1/items?qty=lt.5")
    assert response.status_code == 204 and response.get_data() == b""
    assert [row["id"] for row in rest.rows("items")] == [1, 3, 4]


def test_delete_representation_returns_the_deleted_rows(rest):
    response = rest.anon.delete("/rest/v1/items?id=in.(2,3)&select=id,name", headers=REPRESENTATION)
    assert response.status_code == 200 and response.json == [
        {"id": 2, "name": "apple pie"},
        {"id": 3, "name": "Banana"},
    ]
    assert [row["id"] for row in rest.rows("items")] == [1, 4, 5]
    rest.anon.post("/rest/v1/pairs", json=[{"a": 1, "b": 1}, {"a": 1, "b": 2}])
    gone = rest.anon.delete("/rest/v1/pairs?a=eq.1", headers=REPRESENTATION)
    assert gone.json == [{"a": 1, "b": 1, "value": None}, {"a": 1, "b": 2, "value": None}]


@pytest.mark.parametrize("method", ["patch", "delete"])
@pytest.mark.parametrize("query", ["", "?select=id", "?apikey=x&order=id", "?limit=1"])
def test_patch_and_delete_without_a_filter_are_refused(rest_reads, method, query):
    send = getattr(rest_reads.anon, method)
    response = send(f"/rest/v1/items{query}", json={"qty": 1}, headers=REPRESENTATION)
    assert_rest_error(response, 400)
    assert rest_reads.rows("items")[0]["qty"] == 10 and len(rest_reads.rows("items")) == 5


def test_filters_are_refused_on_insert(rest):
    assert_rest_error(rest.anon.post("/rest/v1/items?id=eq.1", json={"name": "x"}), 400)
    assert_rest_error(rest.anon.post("/rest/v1/items?name.eq=x", json={"name": "x"}), 400)
    assert len(rest.rows("items")) == 5


@pytest.mark.parametrize("method", ["patch", "delete"])
def test_limit_and_order_are_refused_on_writes(rest, method):
    send = getattr(rest.anon, method)
    assert_rest_error(send("/rest/v1/items?id=gt.0&limit=1", json={"qty": 1}), 400)
    assert_rest_error(send("/rest/v1/items?id=gt.0&order=id", json={"qty": 1}), 400)
    assert len(rest.rows("items")) == 5 and rest.rows("items")[0]["qty"] == 10


def test_put_is_not_allowed(rest):
    response = rest.anon.put("/rest/v1/items?id=eq.1", json={"id": 1, "name": "x"})
    assert_rest_error(response, 405)
    assert "PATCH" in response.headers["Allow"]


def test_children_table_is_untouched_by_other_tests(rest):
    assert rest.rows("children") == [] and rest.ids(rest.anon.get("/rest/v1/items")) == [1, 2, 3, 4, 5]
    assert len(rest.seeded) == 5


def test_concurrent_upserts_and_patches_of_the_same_keys(rest):
    """Writers racing on the same new keys, from threads: each request succeeds."""
    statuses = []

    def writer(number):
        client = rest.app.test_client()
        apikey = {"apikey": rest.anon.key}
        for i in range(10):
            created = client.post(
                "/rest/v1/items?on_conflict=code",
                json={"code": f"K{i}", "name": f"writer {number}"},
                headers={**apikey, "Prefer": "return=representation,resolution=merge-duplicates"},
            )
            patched = client.patch(
                f"/rest/v1/items?code=eq.K{i}",
                json={"qty": number},
                headers={**apikey, "Prefer": "return=representation"},
            )
            statuses.extend([created.status_code, patched.status_code])

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(set(statuses)) == [200, 201]
    rows = rest.anon.get("/rest/v1/items?code=like.K*").json
    assert sorted(row["code"] for row in rows) == [f"K{i}" for i in range(10)]


TAGS_TOML = '[tables.tags]\nselect = "anon"\ninsert = "anon"\nupdate = "anon"\ndelete = "anon"\n'


@pytest.fixture
def tags(make_rest, tmp_path):
    """A table whose name column is declared UNIQUE in its own definition, not as a table constraint."""
    config = tmp_path / "tags.toml"
    config.write_text(TAGS_TOML)
    env = make_rest(TABLES_CONFIG=str(config))
    sqlite = env.engine.dialect.name == "sqlite"
    key = "INTEGER PRIMARY KEY" + ("" if sqlite else " AUTO_INCREMENT")
    env.execute(sa.text(f"CREATE TABLE tags (id {key}, name VARCHAR(50) NOT NULL UNIQUE, uses INTEGER)"))
    if sqlite:  # a partial index does not make its columns a key
        env.execute(sa.text("CREATE UNIQUE INDEX tags_uses ON tags (uses) WHERE uses > 0"))
    return env


def test_upsert_on_a_column_declared_unique_in_its_definition(tags):
    prefer = {"Prefer": "return=representation,resolution=merge-duplicates"}
    first = tags.anon.post("/rest/v1/tags?on_conflict=name", json={"name": "red", "uses": 1}, headers=prefer)
    assert first.status_code == 201 and first.json == [{"id": 1, "name": "red", "uses": 1}]
    again = tags.anon.post(
        "/rest/v1/tags?on_conflict=name",
        json=[{"name": "red", "uses": 2}, {"name": "blue", "uses": None}],
        headers=prefer,
    )
    assert again.status_code == 201
    assert again.json == [{"id": 1, "name": "red", "uses": 2}, {"id": 2, "name": "blue", "uses": None}]
    ignored = tags.anon.post(
        "/rest/v1/tags?on_conflict=name",
        json={"name": "red", "uses": 9},
        headers={"Prefer": "return=representation,resolution=ignore-duplicates"},
    )
    assert ignored.status_code == 201 and ignored.json == []
    assert tags.anon.get("/rest/v1/tags?select=name,uses&order=id").json == [
        {"name": "red", "uses": 2},
        {"name": "blue", "uses": None},
    ]
    assert_rest_error(
        tags.anon.post("/rest/v1/tags?on_conflict=uses", json={"name": "x"}, headers=prefer), 400
    )


COUNT = {"Prefer": "count=exact"}


@pytest.mark.parametrize("returns", ["minimal", "representation"])
def test_count_exact_on_writes_answers_how_many_rows_were_written(rest, returns):
    prefer = {"Prefer": f"count=exact,return={returns}"}
    applied = f"return={returns}, count=exact"
    rows = [{"name": f"n{i}"} for i in range(3)]
    inserted = rest.anon.post("/rest/v1/items", json=rows, headers=prefer)
    assert inserted.status_code == 201 and inserted.headers["Content-Range"] == "*/3"
    assert inserted.headers["Preference-Applied"] == applied
    patched = rest.anon.patch("/rest/v1/items?id=gt.5", json={"qty": 1}, headers=prefer)
    assert patched.headers["Content-Range"] == "0-2/3" and patched.headers["Preference-Applied"] == applied
    again = rest.anon.patch("/rest/v1/items?id=gt.5", json={"qty": 1}, headers=prefer)
    assert again.headers["Content-Range"] == "0-2/3"  # matched, though no value changed
    none = rest.anon.patch("/rest/v1/items?id=eq.99", json={"qty": 1}, headers=prefer)
    assert none.headers["Content-Range"] == "*/0"
    deleted = rest.anon.delete("/rest/v1/items?id=gte.5", headers=prefer)
    assert deleted.headers["Content-Range"] == "*/4" and deleted.headers["Preference-Applied"] == applied
    assert rest.anon.delete("/rest/v1/items?id=gte.5", headers=prefer).headers["Content-Range"] == "*/0"
    assert len(rest.rows("items")) == 4


def test_count_exact_on_upserts_counts_merged_rows_but_not_ignored_ones(rest):
    rows = [{"id": 1, "name": "Apple 2"}, {"id": 9, "name": "Kiwi"}]
    merged = rest.anon.post(
        "/rest/v1/items", json=rows, headers={"Prefer": "count=exact,resolution=merge-duplicates"}
    )
    assert merged.headers["Content-Range"] == "*/2"
    assert merged.headers["Preference-Applied"] == "resolution=merge-duplicates, count=exact"
    rows = [{"id": 2, "name": "x"}, {"id": 10, "name": "Lime"}, {"id": 11, "name": "Plum"}]
    ignored = rest.anon.post(
        "/rest/v1/items", json=rows, headers={"Prefer": "count=exact,resolution=ignore-duplicates"}
    )
    assert ignored.headers["Content-Range"] == "*/2"
    one = rest.anon.post("/rest/v1/events", json={"kind": "a"}, headers=COUNT)
    assert one.headers["Content-Range"] == "*/1"
    deleted = rest.anon.delete(
        "/rest/v1/events?kind=eq.a", headers={"Prefer": "count=exact,return=representation"}
    )
    assert deleted.headers["Content-Range"] == "*/1" and deleted.json[0]["kind"] == "a"


@pytest.mark.parametrize("method", ["post", "patch", "delete"])
def test_writes_without_count_answer_no_content_range(rest, method):
    path = "/rest/v1/items" if method == "post" else "/rest/v1/items?id=eq.1"
    response = getattr(rest.anon, method)(path, json={"name": "x"})
    assert response.status_code in (201, 204) and "Content-Range" not in response.headers
    assert "Preference-Applied" not in response.headers


@pytest.mark.parametrize("method", ["patch", "delete"])
def test_max_affected_with_strict_handling_refuses_a_write_that_would_touch_more(rest, method):
    strict = {"Prefer": "handling=strict, max-affected=2", "X-Client-Info": "postgrest-js"}
    before = rest.rows("items")
    send = getattr(rest.service, method)
    refused = send("/rest/v1/items?id=lte.3", headers=strict, json={"qty": 7})
    assert refused.status_code == 400 and refused.json["code"] == "PGRST124"
    assert refused.json["details"] == "The query affects 3 rows"
    assert rest.rows("items") == before  # nothing changed
    lenient = send("/rest/v1/items?id=lte.3", headers={"Prefer": "max-affected=2"}, json={"qty": 7})
    assert lenient.status_code == 204  # without handling=strict it binds nothing, as in PostgREST
    allowed = send("/rest/v1/items?id=eq.4", headers=strict, json={"qty": 7})
    assert allowed.status_code == 204


@pytest.mark.parametrize(
    ("tx_end", "prefer", "kept", "applied"),
    [
        ("commit", None, True, None),
        ("commit", "tx=rollback", True, None),  # no override allowed: ignored, as PostgREST does
        ("commit-allow-override", "tx=rollback", False, "tx=rollback"),
        ("commit-allow-override", "tx=rollback, tx=commit", False, "tx=rollback"),  # the first counts
        ("rollback", "tx=commit", False, None),
        ("rollback-allow-override", None, False, None),
        ("rollback-allow-override", "tx=commit", True, "tx=commit"),
    ],
)
def test_prefer_tx_ends_a_write_as_db_tx_end_allows(make_rest, tx_end, prefer, kept, applied):
    """PostgREST's db-tx-end (DB_TX_END) and Prefer: tx=commit|rollback: the answer is the write's
    as it would be, the rows are kept or not, and Preference-Applied says which tx was honoured."""
    rest = make_rest(DB_TX_END=tx_end)
    headers = {"Prefer": ", ".join(p for p in ("return=representation", prefer) if p)}
    wanted = ", ".join(p for p in ("return=representation", applied) if p)
    created = rest.anon.post("/rest/v1/items", json={"name": "Kiwi"}, headers=headers)
    assert created.status_code == 201 and created.json[0]["name"] == "Kiwi"
    assert created.headers["Preference-Applied"] == wanted
    changed = rest.anon.patch("/rest/v1/items?id=eq.1", json={"name": "Pear"}, headers=headers)
    assert changed.status_code == 200 and changed.json[0]["name"] == "Pear"
    gone = rest.anon.delete("/rest/v1/items?id=eq.2", headers=headers)
    assert gone.status_code == 200 and gone.json[0]["id"] == 2
    names = {row["id"]: row["name"] for row in rest.rows("items")}
    assert ("Kiwi" in names.values(), names[1] == "Pear", 2 not in names) == (kept, kept, kept)
    read = rest.anon.get("/rest/v1/items?id=eq.3", headers={"Prefer": prefer or "count=none"})
    assert read.headers.get("Preference-Applied") == applied


SDK = {"X-Client-Info": "supabase-js/2"}


@pytest.mark.parametrize(
    ("method", "path", "body", "constraint", "details"),
    [
        ("post", "items", {"id": 1, "name": "again"}, "items_pkey", "Key (id)=(1) already exists."),
        ("post", "items", {"name": "x", "code": "A1"}, "items_code_key", "Key (code)=(A1) already exists."),
        ("post", "items", [{"name": "a", "code": "Z9"}, {"name": "b", "code": "A2"}], "items_code_key",
         "Key (code)=(A2) already exists."),
        ("post", "items", [{"name": "a", "code": "Z9"}, {"name": "b", "code": "Z9"}], "items_code_key",
         "Key (code)=(Z9) already exists."),
        ("patch", "items?id=eq.2", {"code": "A1"}, "items_code_key", "Key (code)=(A1) already exists."),
        ("post", "pairs", [{"a": 1, "b": 2}, {"a": 1, "b": 2}], "pairs_pkey",
         "Key (a, b)=(1, 2) already exists."),
    ],
)  # fmt: skip
def test_a_duplicate_key_is_postgresqls_23505(rest, method, path, body, constraint, details):
    """PostgreSQL's words, which apps show: the constraint by the name PostgreSQL gives it, and the
    key that already exists (the client's own values) in details."""
    response = getattr(rest.service, method)(f"/rest/v1/{path}", json=body, headers=SDK)
    assert response.status_code == 409, response.json
    assert response.json == {
        "code": "23505",
        "message": f'duplicate key value violates unique constraint "{constraint}"',
        "details": details,
        "hint": None,
    }


def test_an_upsert_with_missing_default_as_postgrest_answers_it(rest):
    """PostgREST's UpsertSpec: with ?columns=id,name, a merged row keeps the columns not listed (qty
    stays 10) and a row without its key is inserted with a generated one. A listed key a row leaves
    out is the column's default, on a merge too: PostgREST writes `SET col = EXCLUDED.col`."""
    response = rest.anon.post(
        "/rest/v1/items?columns=id,name&select=first:name,again:name,qty",
        json=[{"id": 1, "name": "updated value"}, {"name": "new value"}],
        headers={"Prefer": "return=representation, resolution=merge-duplicates, missing=default"},
    )
    assert response.status_code == 201, response.json
    assert response.json == [
        {"first": "updated value", "again": "updated value", "qty": 10},
        {"first": "new value", "again": "new value", "qty": None},
    ]
    assert response.headers["Preference-Applied"] == (
        "resolution=merge-duplicates, missing=default, return=representation"
    )
    assert [(row["id"], row["qty"]) for row in rest.rows("items")][0] == (1, 10)
    merged = rest.anon.post(
        "/rest/v1/children?columns=id,item_id,label&select=id,label,l:label",
        json=[{"id": 1, "item_id": 1, "label": "x"}],
        headers={"Prefer": "return=representation, missing=default"},
    )
    assert merged.json == [{"id": 1, "label": "x", "l": "x"}]
    defaulted = rest.anon.post(
        "/rest/v1/children?columns=id,item_id,label",
        json=[{"id": 1, "item_id": 2}],
        headers={"Prefer": "return=representation, resolution=merge-duplicates, missing=default"},
    )
    assert defaulted.status_code == 200, defaulted.json
    assert defaulted.json == [{"id": 1, "item_id": 2, "label": "child"}]
    nulled = rest.anon.post(
        "/rest/v1/items?columns=id,name,qty",
        json=[{"id": 2, "name": "pie"}],
        headers={"Prefer": "return=representation, resolution=merge-duplicates, missing=default"},
    )
    assert nulled.json[0]["qty"] is None  # no default: NULL, as EXCLUDED.qty is
