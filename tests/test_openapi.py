"""GET /rest/v1/ describes the exposed tables as the caller may use them."""

import pytest
from openapi_spec_validator import validate
from sqlalchemy import create_engine, text

from support import Api, assert_rest_error

TOML = """
[tables.places]
select = "anon"
insert = "owner"
update = "owner"
delete = "service_role"
owner_column = "user_id"

[tables.secrets]
select = "service_role"

[tables.planned]
select = "anon"

[tables.place_names]
select = "anon"
insert = "anon"
update = "anon"
primary_key = "id"

[tables.users]
select = "authenticated"
columns = ["user_id", "username"]
"""


@pytest.fixture
def described(backend, database_url, make_app, tmp_path, anon_key, service_key):
    key = "INTEGER PRIMARY KEY" + (" AUTO_INCREMENT" if backend == "mysql" else "")
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                f"CREATE TABLE places (id {key}, name VARCHAR(80) NOT NULL, "
                "location VARCHAR(80), user_id INTEGER, visited DATE)"
            )
        )
        connection.execute(text("CREATE TABLE secrets (id INTEGER PRIMARY KEY, word VARCHAR(10))"))
        connection.execute(text("CREATE VIEW place_names AS SELECT id, name FROM places"))
    engine.dispose()
    (tmp_path / "tables.toml").write_text(TOML)
    app = make_app(TABLES_CONFIG=str(tmp_path / "tables.toml"))
    return Api(app, anon_key), Api(app, service_key)


def test_anon_sees_what_anon_may_do(described):
    anon, _ = described
    response = anon.get("/rest/v1/")
    assert response.status_code == 200
    doc = response.json
    validate(doc)
    assert set(doc["paths"]["/rest/v1/places"]) == {"get"}
    assert "/rest/v1/secrets" not in doc["paths"] and "/rest/v1/planned" not in doc["paths"]
    assert "/auth/v1/token" in doc["paths"]
    for path in ("/auth/v1/recover", "/auth/v1/otp", "/auth/v1/resend", "/auth/v1/invite"):
        assert "post" in doc["paths"][path]
    assert set(doc["paths"]["/auth/v1/verify"]) == {"get", "post"}
    places = doc["components"]["schemas"]["places"]
    assert places["properties"]["id"] == {"type": "integer", "description": "primary key"}
    assert places["properties"]["name"] == {"type": "string", "maxLength": 80}
    assert places["properties"]["visited"] == {"type": "string", "format": "date", "nullable": True}
    assert places["required"] == ["name"]


def test_signed_in_users_and_the_service_role_see_more(described):
    anon, service = described
    token = anon.sign_up()["access_token"]
    signed_in = anon.get("/rest/v1/", token=token).json
    assert set(signed_in["paths"]["/rest/v1/places"]) == {"get", "post", "patch"}
    assert "owner" in signed_in["paths"]["/rest/v1/places"]["post"]["description"]
    everything = service.get("/rest/v1/").json
    validate(everything)
    assert set(everything["paths"]["/rest/v1/places"]) == {"get", "post", "patch", "delete"}
    assert "/rest/v1/secrets" in everything["paths"]


def test_the_description_needs_an_api_key(described):
    anon, _ = described
    assert_rest_error(anon.client.get("/rest/v1/"), 401)


def responses_of(doc, path, method):
    return doc["paths"][path][method]["responses"]


def test_each_operation_documents_its_errors_in_the_error_body(described):
    anon, service = described
    doc = service.get("/rest/v1/").json
    validate(doc)
    error = {"$ref": "#/components/schemas/Error"}
    expected = {
        "get": {"400", "401", "403", "406", "416", "503"},
        "post": {"400", "401", "403", "406", "409", "413", "503"},
        "patch": {"400", "401", "403", "406", "409", "413", "503"},
        "delete": {"400", "401", "403", "406", "409", "503"},
    }
    for method, statuses in expected.items():
        responses = responses_of(doc, "/rest/v1/places", method)
        failing = {status for status in responses if status >= "400"}
        assert failing == statuses, (method, failing)
        for status in statuses:
            assert responses[status]["content"]["application/json"]["schema"] == error
            assert responses[status]["description"]
    body = doc["components"]["schemas"]["Error"]
    assert set(body["properties"]) == {"message", "code", "hint", "details"}
    assert body["properties"]["code"]["oneOf"] == [{"type": "integer"}, {"type": "string"}]
    auth_error = {"$ref": "#/components/schemas/AuthError"}
    token = responses_of(doc, "/auth/v1/token", "post")
    assert {"400", "401", "429", "503"} <= set(token)
    assert token["429"]["content"]["application/json"]["schema"] == auth_error
    assert set(doc["components"]["schemas"]["AuthError"]["properties"]) == {
        "code",
        "error_code",
        "msg",
        "message",
    }
    assert {status for status in responses_of(doc, "/auth/v1/settings", "get") if status >= "400"} == {"401"}
    # and the errors are what the API answers: an unknown column, a body that is not JSON, no key
    assert_rest_error(service.get("/rest/v1/places?nope=eq.1"), 400)
    assert_rest_error(service.post("/rest/v1/places", data="{", content_type="application/json"), 400)
    assert_rest_error(anon.client.get("/rest/v1/places"), 401)


def test_writes_say_when_they_answer_without_a_body(described):
    _, service = described
    doc = service.get("/rest/v1/").json
    created = responses_of(doc, "/rest/v1/places", "post")["201"]
    assert "return=minimal" in created["description"] and "no body" in created["description"]
    for method in ("patch", "delete"):
        responses = responses_of(doc, "/rest/v1/places", method)
        assert "content" not in responses["204"] and "no body" in responses["204"]["description"]
        assert "return=representation" in responses["200"]["description"]
    prefer = doc["paths"]["/rest/v1/places"]["post"]["parameters"]
    assert [p["name"] for p in prefer] == ["Prefer"]
    # as the API does: 201 and no body by default, the rows with return=representation
    plain = service.post("/rest/v1/places", json={"name": "a"})
    assert plain.status_code == 201 and plain.get_data() == b""
    shown = service.post("/rest/v1/places", json={"name": "b"}, headers={"Prefer": "return=representation"})
    assert shown.status_code == 201 and shown.json[0]["name"] == "b"


def test_views_and_the_users_table_are_marked_read_only(described):
    """A view's rules may say insert and update: a write is a 405 all the same, so the description
    offers none, and marks the table and its columns read-only; the users table likewise."""
    anon, service = described
    token = anon.sign_up()["access_token"]
    for doc in (service.get("/rest/v1/").json, anon.get("/rest/v1/", token=token).json):
        validate(doc)
        for name in ("place_names", "users"):
            assert set(doc["paths"][f"/rest/v1/{name}"]) == {"get"}, name
            schema = doc["components"]["schemas"][name]
            assert schema["x-read-only"] is True and schema["description"].startswith("read-only: ")
            assert all(prop["readOnly"] for prop in schema["properties"].values())
        assert "x-read-only" not in doc["components"]["schemas"]["places"]
        assert not any(
            p.get("readOnly") for p in doc["components"]["schemas"]["places"]["properties"].values()
        )
    # as the API does: a write to either is refused
    assert service.post("/rest/v1/place_names", json={"name": "x"}).status_code == 405
    assert service.patch("/rest/v1/users?user_id=eq.1", json={"username": "x"}).status_code == 405
