"""Error codes: an official SDK (known by X-Client-Info or by Accept-Profile) gets PostgREST's code,
a SQLSTATE or a PGRST code, as a string; any other client gets the HTTP status as an integer."""

import pytest

from support import assert_rest_error

OBJECT = {"Accept": "application/vnd.pgrst.object+json"}
SDK_HEADERS = [{"X-Client-Info": "supabase-js/2.45.4"}, {"Accept-Profile": "public"}]

# (method, path, body, headers, status, code)
CASES = [
    ("post", "/rest/v1/items", {"id": 1, "name": "again"}, {}, 409, "23505"),
    ("get", "/rest/v1/items?select=id,colour", None, {}, 400, "42703"),
    ("get", "/rest/v1/items?colour=eq.1", None, {}, 400, "42703"),
    ("post", "/rest/v1/items", {"name": "x", "colour": 1}, {}, 400, "PGRST204"),
    ("get", "/rest/v1/items?id=eqq.1", None, {}, 400, "PGRST100"),
    ("get", "/rest/v1/items?limit=x", None, {}, 400, "PGRST100"),
    ("get", "/rest/v1/items", None, OBJECT, 406, "PGRST116"),
    ("get", "/rest/v1/t_service_role", None, {}, 401, "42501"),
    ("get", "/rest/v1/itemz", None, {}, 404, "PGRST205"),
    ("get", "/rest/v1/gone", None, {}, 404, "PGRST205"),
    ("get", "/rest/v1/items?id=eq.abc", None, {}, 400, "22P02"),
    ("post", "/rest/v1/items", {"name": "x" * 51}, {}, 400, "22001"),
    ("post", "/rest/v1/items", {"name": "x", "qty": 2**63}, {}, 400, "22003"),
    ("post", "/rest/v1/items", {"price": 1}, {}, 400, "23502"),
    ("post", "/rest/v1/items", {"name": "x", "qty": -1}, {}, 400, "23514"),
    ("post", "/rest/v1/children", {"item_id": 12345}, {}, 409, "23503"),
    ("post", "/rest/v1/items?on_conflict=name", {"name": "x"}, {"Prefer": "resolution=merge-duplicates"},
     400, "42P10"),
    ("post", "/rest/v1/items", [{"name": "x"}, {"qty": 1}], {}, 400, "PGRST102"),
    ("patch", "/rest/v1/items", {"name": "x"}, {}, 400, "21000"),
    ("get", "/rest/v1/items?offset=9", None, {"Prefer": "count=exact"}, 416, "PGRST103"),
    ("get", "/rest/v1/items", None, {"Range": "5-2"}, 400, "PGRST103"),
    ("get", "/rest/v1/items", None, {"Accept": "application/xml"}, 406, "PGRST107"),
]  # fmt: skip


@pytest.mark.parametrize("sdk", SDK_HEADERS, ids=["x-client-info", "accept-profile"])
@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "code"), CASES)
def test_an_official_sdk_gets_postgrest_codes(rest_reads, sdk, method, path, body, headers, status, code):
    response = getattr(rest_reads.anon, method)(path, json=body, headers={**headers, **sdk})
    assert response.status_code == status, response.get_data(as_text=True)
    answer = response.get_json()
    assert set(answer) == {"message", "code", "hint", "details"}
    assert answer["code"] == code and answer["message"]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "code"), CASES)
def test_a_plain_client_gets_the_status(rest_reads, method, path, body, headers, status, code):
    response = getattr(rest_reads.anon, method)(path, json=body, headers=headers)
    assert_rest_error(response, status, sent=path)


MISSING = 'foreign key violation: a value in table "children" refers to a missing row'
REFERENCED = 'foreign key violation: other rows still refer to this row of table "items"'


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("delete", "/rest/v1/items?id=eq.1", None, REFERENCED),
        ("delete", "/rest/v1/items?id=lte.2", None, REFERENCED),
        ("patch", "/rest/v1/items?id=eq.1", {"id": 100}, REFERENCED),
        ("patch", "/rest/v1/items?id=eq.1", {"id": 100, "name": "x"}, REFERENCED),
        ("patch", "/rest/v1/children?id=eq.1", {"item_id": 999}, MISSING),
        ("post", "/rest/v1/children", {"item_id": 999}, MISSING),
        ("post", "/rest/v1/children", [{"item_id": 2}, {"item_id": 999}], MISSING),
    ],
)
@pytest.mark.parametrize("returns", ["minimal", "representation"])
def test_foreign_key_violations_say_which_side_on_both_databases(rest, method, path, body, message, returns):
    assert rest.anon.post("/rest/v1/children", json={"item_id": 1}).status_code == 201
    headers = {"Prefer": f"return={returns}"}
    response = getattr(rest.anon, method)(path, json=body, headers={**headers, **SDK_HEADERS[0]})
    assert response.status_code == 409 and response.json["code"] == "23503", response.json
    assert response.json["message"] == message
    assert (
        assert_rest_error(getattr(rest.anon, method)(path, json=body, headers=headers), 409)["message"]
        == message
    )
    assert len(rest.rows("items")) == 5 and rest.rows("items")[0]["id"] == 1
    assert [row["item_id"] for row in rest.rows("children")] == [1]


def test_another_users_owner_column_is_a_permission_error(rest):
    session = rest.anon.sign_up(email="b@example.com")
    headers = {**SDK_HEADERS[0]}
    response = rest.anon.post(
        "/rest/v1/notes", json={"body": "x", "user_id": 999}, token=session["access_token"], headers=headers
    )
    assert response.status_code == 403 and response.json["code"] == "42501"


@pytest.mark.parametrize(
    "method, header", [("get", "Accept-Profile"), ("post", "Content-Profile"), ("delete", "Content-Profile")]
)
def test_a_schema_minibase_does_not_serve_is_a_406_not_the_default_one(rest, method, header):
    """postgrest-js's .schema('private') must not read public silently."""
    response = getattr(rest.anon, method)("/rest/v1/items?id=eq.1", headers={header: "private"}, json={})
    body = response.get_json()
    assert response.status_code == 406 and body["code"] == "PGRST106"  # the header marks an SDK
    assert body["message"] == "The schema must be one of the following: public"
    assert rest.anon.get("/rest/v1/items?id=eq.1", headers={"Accept-Profile": "public"}).status_code == 200


def test_rest_error_codes_postgrest_gives_every_client_postgrest_s_strings(make_rest):
    plain = make_rest(REST_ERROR_CODES="postgrest").anon.get("/rest/v1/items?nope=eq.1")
    assert plain.status_code == 400 and plain.get_json()["code"] == "42703"
    seed = make_rest().anon.get("/rest/v1/items?nope=eq.1")
    assert seed.get_json()["code"] == 400  # the seed's integer code stays the default
