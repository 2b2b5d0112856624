"""/rest/v1 over a real waitress server: the request sequence postgrest-py sends, as plain HTTP
(the headers and query strings it writes), then the official postgrest-py client itself, unchanged."""

import pytest
import requests
from postgrest import SyncPostgrestClient
from postgrest.exceptions import APIError as PostgrestError


@pytest.fixture
def app(rest):
    """live_server serves this app: the one exposing the test tables."""
    return rest.app


def test_postgrest_py_request_sequence_over_http(live_server, rest):
    base = f"{live_server}/rest/v1"
    key = rest.anon.key
    headers = {
        "apikey": key,
        "Authorization": f"Bearer {key}",
        "Accept-Profile": "public",
        "Content-Profile": "public",
        "Content-Type": "application/json",
    }
    found = requests.get(
        f"{base}/items?select=id%2Cname&name=eq.Date&id=gt.3&id=in.%285%2C2%29&order=id.desc&offset=0&limit=10",
        headers=headers,
        timeout=10,
    )
    assert found.status_code == 200 and found.json() == [{"id": 5, "name": "Date"}]
    assert found.headers["Content-Range"] == "0-0/*"

    representation = {**headers, "Prefer": "return=representation"}
    created = requests.post(
        f"{base}/items", json={"name": "new", "price": 1.5}, headers=representation, timeout=10
    )
    assert created.status_code == 201
    row = created.json()[0]
    assert row["id"] == 6 and row["name"] == "new" and row["price"] == 1.5

    patched = requests.patch(
        f"{base}/items?id=eq.6", json={"name": "upd"}, headers=representation, timeout=10
    )
    assert patched.status_code == 200 and patched.json()[0]["name"] == "upd"

    deleted = requests.delete(f"{base}/items?id=eq.6", headers=representation, timeout=10)
    assert deleted.status_code == 200 and deleted.json()[0]["id"] == 6

    counted = requests.get(
        f"{base}/items?select=id&limit=1", headers={**headers, "Prefer": "count=exact"}, timeout=10
    )
    assert counted.status_code == 206 and counted.headers["Content-Range"] == "0-0/5"

    minimal = requests.post(f"{base}/items", json={"name": "quiet"}, headers=headers, timeout=10)
    assert minimal.status_code == 201 and minimal.content == b""
    removed = requests.delete(f"{base}/items?name=eq.quiet", headers=headers, timeout=10)
    assert removed.status_code == 204 and removed.content == b""

    refused = requests.delete(f"{base}/items", headers=headers, timeout=10)
    assert refused.status_code == 400 and set(refused.json()) == {"message", "code", "hint", "details"}
    assert refused.headers["Content-Type"] == "application/json"
    assert len(requests.get(f"{base}/items", headers=headers, timeout=10).json()) == 5


def test_official_postgrest_client(live_server, rest):
    key = rest.service.key
    client = SyncPostgrestClient(
        f"{live_server}/rest/v1", headers={"apikey": key, "Authorization": f"Bearer {key}"}
    )
    try:
        found = (
            client.from_("items").select("id,name").ilike("name", "apple*").order("id", desc=True).execute()
        )
        assert found.data == [{"id": 2, "name": "apple pie"}, {"id": 1, "name": "Apple"}]

        page = client.from_("items").select("id", count="exact").range(1, 2).execute()
        assert page.data == [{"id": 2}, {"id": 3}] and page.count == 5

        single = client.from_("items").select("name").eq("id", 3).single().execute()
        assert single.data == {"name": "Banana"}

        inserted = client.from_("items").insert([{"name": "Fig", "qty": 1}, {"name": "Kiwi"}]).execute()
        assert [(row["name"], row["qty"]) for row in inserted.data] == [("Fig", 1), ("Kiwi", None)]

        updated = client.from_("items").update({"qty": 9}).in_("name", ["Fig", "Kiwi"]).execute()
        assert sorted(row["qty"] for row in updated.data) == [9, 9]

        upserted = (
            client.from_("items").upsert({"code": "A1", "name": "Apple!"}, on_conflict="code").execute()
        )
        assert upserted.data[0]["id"] == 1 and upserted.data[0]["name"] == "Apple!"

        either = client.from_("items").select("id").or_("id.eq.1,qty.eq.9").execute()
        assert [row["id"] for row in either.data] == [1, 6, 7]

        deleted = client.from_("items").delete().eq("name", "Fig").execute()
        assert [row["name"] for row in deleted.data] == ["Fig"]

        # An official SDK gets PostgREST's error body: the SQLSTATE or PGRST code as a string.
        with pytest.raises(PostgrestError) as duplicate:
            client.from_("items").insert({"id": 1, "name": "again"}).execute()
        assert duplicate.value.code == "23505"
        assert duplicate.value.message == 'duplicate key value violates unique constraint "items_pkey"'
        assert duplicate.value.details == "Key (id)=(1) already exists."

        with pytest.raises(PostgrestError) as unknown:
            client.from_("itemz").select("*").execute()
        assert unknown.value.code == "PGRST205"
        assert unknown.value.message == "Could not find the table 'public.itemz' in the schema cache"
        assert unknown.value.hint == "Perhaps you meant the table 'public.items'"
    finally:
        client.session.close()
