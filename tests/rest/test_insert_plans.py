"""A row is inserted by a statement compiled once per table and set of columns and run on the
session's connection (rest/writes.py): the keys it reports, names that need quoting, a table that
changes under its cached plan, and the fallback for a key only RETURNING can read back. A write's
query string and headers are parsed once (blueprints/rest_request.py): each body is still read and checked."""

import pytest
import sqlalchemy as sa

from blueprints import rest_request
from support import assert_rest_error

REPRESENTATION = {"Prefer": "return=representation"}
ODD = 'odd %(name)s col "q"'  # a format placeholder, a percent, a space and quotes, in one name


def test_the_key_reported_is_the_new_rows_or_the_one_given(rest):
    response = rest.anon.post(
        "/rest/v1/items", json={"name": "Fig"}, headers={"Prefer": "return=headers-only"}
    )
    assert response.status_code == 201 and response.headers["Location"] == "/items?id=eq.6"
    response = rest.anon.post("/rest/v1/items", json={"id": 40, "name": "Kiwi"}, headers=REPRESENTATION)
    assert response.status_code == 201 and response.json[0]["id"] == 40
    response = rest.anon.post("/rest/v1/pairs", json={"a": 3, "b": 4, "value": "x"}, headers=REPRESENTATION)
    assert response.json == [{"a": 3, "b": 4, "value": "x"}]
    assert response.headers.get("Location") is None
    response = rest.anon.post(
        "/rest/v1/pairs", json={"a": 5, "b": 6}, headers={"Prefer": "return=headers-only"}
    )
    assert response.headers["Location"] == "/pairs?a=eq.5&b=eq.6"
    assert [row["name"] for row in rest.rows("items")[5:]] == ["Fig", "Kiwi"]


def test_the_same_columns_in_another_order_insert_the_values_given(rest):
    for body in ({"name": "Fig", "qty": 1, "note": "a"}, {"note": "b", "qty": 2, "name": "Lime"}):
        assert rest.anon.post("/rest/v1/items", json=body).status_code == 201
    assert [(r["name"], r["qty"], r["note"]) for r in rest.rows("items")[5:]] == [
        ("Fig", 1, "a"),
        ("Lime", 2, "b"),
    ]


def test_a_refused_value_is_a_400_and_a_duplicate_a_409_as_before(rest):
    refused = assert_rest_error(rest.anon.post("/rest/v1/items", json={"name": "Fig", "qty": -1}), 400)
    assert "check constraint" in refused["message"]
    duplicate = assert_rest_error(rest.anon.post("/rest/v1/items", json={"name": "Fig", "code": "A1"}), 409)
    assert "A1" in duplicate["details"]
    assert_rest_error(rest.anon.post("/rest/v1/children", json={"item_id": 999}), 409)
    assert len(rest.rows("items")) == 5 and rest.rows("children") == []


@pytest.fixture
def odd(make_rest, database_url, tmp_path, tables_toml):
    engine = sa.create_engine(database_url)
    table = sa.Table(
        "odd",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(ODD, sa.String(40)),
        sa.Column("plain", sa.Integer),
    )
    table.create(engine)
    (tmp_path / "tables.toml").write_text(tables_toml + '\n[tables.odd]\nselect = "anon"\ninsert = "anon"\n')
    yield make_rest(), engine, table
    engine.dispose()


def test_a_column_whose_name_needs_quoting_is_written_as_given(odd):
    rest, engine, table = odd
    body = {ODD: "50% off %s", "plain": 7}
    response = rest.anon.post("/rest/v1/odd", json=body, headers=REPRESENTATION)
    assert response.status_code == 201 and response.json == [{"id": 1, **body}]
    with engine.connect() as connection:
        assert connection.execute(sa.select(table.c[ODD], table.c.plain)).all() == [("50% off %s", 7)]


def test_a_column_dropped_under_a_cached_insert_is_a_400_after_the_table_is_reflected_again(odd):
    rest, engine, table = odd
    assert rest.anon.post("/rest/v1/odd", json={ODD: "x", "plain": 1}).status_code == 201
    with engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE odd DROP COLUMN plain")
    response = rest.anon.post("/rest/v1/odd", json={ODD: "y", "plain": 2})
    assert "Could not find the 'plain' column" in assert_rest_error(response, 400)["message"]
    assert rest.anon.post("/rest/v1/odd", json={ODD: "z"}).status_code == 201
    with engine.connect() as connection:
        assert connection.execute(sa.select(table.c[ODD]).order_by(table.c.id)).scalars().all() == ["x", "z"]


@pytest.fixture
def server_keyed(make_rest, database_url, tmp_path, tables_toml, backend):
    """A table whose text primary key the database fills: only RETURNING reads it back."""
    engine = sa.create_engine(database_url)
    default = "(lower(hex(randomblob(8))))" if backend == "sqlite" else "(uuid())"
    with engine.begin() as connection:
        connection.exec_driver_sql(
            f"CREATE TABLE tokens (id VARCHAR(40) PRIMARY KEY DEFAULT {default}, label VARCHAR(20))"
        )
    (tmp_path / "tables.toml").write_text(
        tables_toml + '\n[tables.tokens]\nselect = "anon"\ninsert = "anon"\n'
    )
    yield make_rest(), engine
    engine.dispose()


def test_a_key_the_database_fills_is_read_back_as_before(server_keyed):
    rest, engine = server_keyed
    response = rest.anon.post("/rest/v1/tokens", json={"label": "a"}, headers=REPRESENTATION)
    assert response.status_code == 201, response.json
    with engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT id, label FROM tokens").all()
    assert response.json == [{"id": stored[0][0], "label": "a"}] and stored[0][0]


def test_a_write_parsed_before_still_reads_and_checks_each_body(rest):
    url = "/rest/v1/items?columns=name,qty"
    assert rest.anon.post(url, json=[{"name": "Fig", "qty": 1}]).status_code == 201
    bad = rest.anon.post(url, data=b'{"name": ', headers={"Content-Type": "application/json"})
    assert assert_rest_error(bad, 400)["message"] == "Could not parse the request body as JSON"
    assert (
        rest.anon.post(url, json={"name": "Lime", "qty": 2, "note": "not a column asked for"}).status_code
        == 201
    )
    assert rest.anon.post(url, json={"name": "Kiwi", "qty": "many"}).status_code == 400
    assert rest.anon.post("/rest/v1/items", json=[{"name": "A"}, {"name": "B"}]).status_code == 201
    mixed = rest.anon.post("/rest/v1/items", json=[{"name": "C"}, {"name": "D", "qty": 1}])
    assert assert_rest_error(mixed, 400)["message"] == "All object keys must match"
    assert [(r["name"], r["qty"], r["note"]) for r in rest.rows("items")[5:]] == [
        ("Fig", 1, None),
        ("Lime", 2, None),
        ("A", None, None),
        ("B", None, None),
    ]


def test_a_write_parsed_before_is_not_another_methods_nor_other_headers(rest):
    url = "/rest/v1/items?id=eq.1"
    assert rest.anon.patch(url, json={"qty": 3}).status_code == 204
    assert rest.anon.patch(url, json={"qty": 4}, headers=REPRESENTATION).json[0]["qty"] == 4
    refused = rest.anon.patch(url, json={"qty": 5}, headers={"Accept": "text/html"})
    assert assert_rest_error(refused, 406)["message"].startswith("None of these media types")
    assert rest.anon.delete(url, headers=REPRESENTATION).json[0]["qty"] == 4
    assert rest.anon.post("/rest/v1/items", json={"name": "Fig"}).get_data() == b""
    made = rest.anon.post("/rest/v1/items", json={"name": "Lime"}, headers=REPRESENTATION)
    assert made.status_code == 201 and made.json[0]["name"] == "Lime"
    filtered = rest.anon.post(url, json={"name": "Kiwi"})
    assert assert_rest_error(filtered, 400)["message"] == "filters are not supported on POST"


def test_kept_write_parses_are_bounded(rest, monkeypatch):
    monkeypatch.setattr(rest_request, "WRITES", {})
    monkeypatch.setattr(rest_request, "MAX_KEPT", 3)
    for n in range(1, 6):
        assert rest.anon.patch(f"/rest/v1/items?id=eq.{n}", json={"qty": n}).status_code == 204
    assert 0 < len(rest_request.WRITES) <= 3
    assert [row["qty"] for row in rest.rows("items")] == [1, 2, 3, 4, 5]
