"""Exposed columns, the users table listed read-only, and views, on both databases: what a
`columns` list leaves out cannot be read, filtered, ordered or written, and a view or the users
table cannot be written at all."""

import pytest
import sqlalchemy as sa

from support import Api, assert_rest_error

EXTRA = """
[tables.priced]
select = "anon"
insert = "anon"
update = "anon"
columns = ["id", "name", "price"]

[tables.users]
select = "authenticated"
columns = ["user_id", "username"]

[tables.cheap_items]
select = "anon"
insert = "anon"
primary_key = "id"
"""


@pytest.fixture
def rest(make_rest, tables_toml, tmp_path, database_url):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE VIEW priced AS SELECT * FROM items"))
        connection.execute(
            sa.text("CREATE VIEW cheap_items AS SELECT id, name, price FROM items WHERE price < 3")
        )
    engine.dispose()
    config = tmp_path / "columns.toml"
    config.write_text(tables_toml + EXTRA)
    return make_rest(TABLES_CONFIG=str(config))


def test_only_the_listed_columns_exist_for_the_api(rest):
    rows = rest.anon.get("/rest/v1/priced?order=id&limit=1").json
    assert rows == [{"id": 1, "name": "Apple", "price": 1.5}]
    for query in ("select=id,note", "note=eq.red", "order=note", "note.eq=red"):
        body = assert_rest_error(rest.anon.get(f"/rest/v1/priced?{query}"), 400)
        assert "note" in body["message"]
    schema = rest.anon.get("/rest/v1/").json["components"]["schemas"]["priced"]
    assert set(schema["properties"]) == {"id", "name", "price"}


def test_the_users_table_is_readable_without_its_hashes_and_never_writable(rest):
    api = rest.anon
    token = api.sign_up(username="ann")["access_token"]
    assert_rest_error(api.get("/rest/v1/users"), 401)
    assert api.get("/rest/v1/users", token=token).json == [{"user_id": 1, "username": "ann"}]
    for query in ("select=password", "password=like.*"):
        assert_rest_error(api.get(f"/rest/v1/users?{query}", token=token), 400)
    for method in ("post", "patch", "delete"):
        response = getattr(rest.service, method)("/rest/v1/users?user_id=eq.1", json={"username": "x"})
        assert_rest_error(response, 405)
    assert api.get("/rest/v1/users", token=token).json == [{"user_id": 1, "username": "ann"}]


def test_a_view_is_read_in_its_key_order_and_never_written(rest):
    rows = rest.anon.get("/rest/v1/cheap_items").json
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows) and rows
    response = rest.anon.post("/rest/v1/cheap_items", json={"name": "x", "price": 1})
    assert_rest_error(response, 405)
    assert response.headers["Allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('[tables.users]\nselect = "anon"\n', "only be listed with a columns list"),
        ('[tables.users]\nselect = "anon"\ncolumns = ["user_id", "password"]\n', "password column"),
        ('[tables.users]\nselect = "anon"\ninsert = "anon"\ncolumns = ["user_id"]\n', "read-only"),
        ('[tables.t]\nselect = "anon"\ncolumns = []\n', "columns must be a list"),
    ],
)
def test_a_listing_that_could_leak_refuses_to_start(make_app, tmp_path, entry, message):
    from variables import ConfigError

    config = tmp_path / "bad.toml"
    config.write_text(entry)
    with pytest.raises(ConfigError, match=message):
        make_app(TABLES_CONFIG=str(config))


def test_official_sdk_reads_the_users_table_by_its_listed_columns(rest, anon_key):
    token = rest.anon.sign_up(username="ann")["access_token"]
    api = Api(rest.app, anon_key)
    response = api.get("/rest/v1/users?select=*", token=token, headers={"X-Client-Info": "supabase-js/2"})
    assert response.json == [{"user_id": 1, "username": "ann"}]


def test_a_double_column_reads_back_every_digit(make_rest, tables_toml, tmp_path, database_url):
    # MySQL's DOUBLE reflects as a Decimal type kept to 10 places: 1.25e-12 read back as 0.
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text("CREATE TABLE readings (id INTEGER PRIMARY KEY, value DOUBLE, ratio FLOAT)")
        )
        connection.execute(
            sa.text("INSERT INTO readings VALUES (1, 1.25e-12, 0.5), (2, 0.1234567890123456, 2)")
        )
    engine.dispose()
    config = tmp_path / "readings.toml"
    config.write_text(tables_toml + '\n[tables.readings]\nselect = "anon"\ninsert = "anon"\n')
    rest = make_rest(TABLES_CONFIG=str(config))
    response = rest.anon.get("/rest/v1/readings?select=id,value,ratio&order=id")
    assert response.json == [
        {"id": 1, "value": 1.25e-12, "ratio": 0.5},
        {"id": 2, "value": 0.1234567890123456, "ratio": 2.0},
    ]
    assert rest.anon.post("/rest/v1/readings", json={"id": 3, "value": 6.02e23}).status_code == 201
    assert rest.anon.get("/rest/v1/readings?id=eq.3&select=value").json == [{"value": 6.02e23}]
