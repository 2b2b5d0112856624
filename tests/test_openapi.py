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
