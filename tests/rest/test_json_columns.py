"""JSON columns read and write as JSON on both databases. MariaDB makes `col JSON` a LONGTEXT
kept valid by CHECK (json_valid(col)), which reflects as text: minibase finds the check."""

import sqlalchemy as sa

from support import Api, assert_rest_error

TABLES = """
[tables.documents]
select = "anon"
insert = "anon"
"""


def test_a_json_column_answers_json_documents(make_app, database_url, tmp_path, anon_key):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE documents (id INTEGER PRIMARY KEY, data JSON)"))
        connection.execute(sa.text("""INSERT INTO documents VALUES (1, '{"tags": ["a", "b"], "n": 1}')"""))
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    api = Api(make_app(TABLES_CONFIG=str(config)), anon_key)
    assert api.get("/rest/v1/documents?id=eq.1").json == [{"id": 1, "data": {"tags": ["a", "b"], "n": 1}}]
    written = api.post(
        "/rest/v1/documents",
        json={"id": 2, "data": {"nested": {"ok": True}, "list": [1, 2]}},
        headers={"Prefer": "return=representation"},
    )
    assert written.status_code == 201
    assert written.json == [{"id": 2, "data": {"nested": {"ok": True}, "list": [1, 2]}}]
    assert api.get("/rest/v1/documents?id=eq.2&select=data").json == [
        {"data": {"nested": {"ok": True}, "list": [1, 2]}}
    ]


def test_a_number_too_large_for_a_double_is_refused_in_a_json_column(
    make_app, database_url, tmp_path, anon_key
):
    """`1e999` in a JSON column's document was stored as `Infinity` on SQLite (invalid JSON for every
    reader after) and was a 503 on MariaDB: it is a 400, as NaN is, and nothing is written."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE documents (id INTEGER PRIMARY KEY, data JSON)"))
        connection.execute(sa.text("""INSERT INTO documents VALUES (1, '{"n": 1}')"""))
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES + 'update = "anon"\n')
    api = Api(make_app(TABLES_CONFIG=str(config)), anon_key)
    json_type = {"Content-Type": "application/json"}
    for body in (
        b'{"id": 2, "data": {"n": 1e999}}',
        b'{"id": 2, "data": [-1e999]}',
        b'{"id": 2, "data": 1E400}',
    ):
        assert_rest_error(api.post("/rest/v1/documents", data=body, headers=json_type), 400)
        assert_rest_error(api.post("/rest/v1/documents", data=b"[" + body + b"]", headers=json_type), 400)
    patched = api.patch("/rest/v1/documents?id=eq.1", data=b'{"data": {"n": 1e999}}', headers=json_type)
    assert_rest_error(patched, 400)
    answer = api.get("/rest/v1/documents")
    assert answer.json == [{"id": 1, "data": {"n": 1}}] and "Infinity" not in answer.get_data(as_text=True)
