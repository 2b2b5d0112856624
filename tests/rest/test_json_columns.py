"""JSON columns read and write as JSON on both databases. MariaDB makes `col JSON` a LONGTEXT
kept valid by CHECK (json_valid(col)), which reflects as text: minibase finds the check."""

import sqlalchemy as sa

from support import Api

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
