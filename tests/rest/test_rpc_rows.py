"""Functions of a table's rows (`table = "docs"`, PostgreSQL's RETURNS SETOF docs) and void functions,
on both databases: the rows come back as the table's (JSON columns as JSON), a select with embeds,
filters, order, paging, counts and aggregates runs over them in the SQL, and the table's rule and
row policies still hold, as they do inside a PostgreSQL function that runs with the caller's rights."""

import json
import os
import subprocess
import tomllib

import pytest
import sqlalchemy as sa

import tables_toml
from support import Api, assert_rest_error, serve_app
from variables import ConfigError

TABLES = """
[tables.authors]
select = "anon"

[tables.docs]
select = "anon"

[tables.docs.policies]
select = "published = 1 OR author_id = :uid"

[tables.secrets]
select = "service_role"

[functions.docs_from]
sql = "SELECT * FROM docs WHERE id >= :first ORDER BY id DESC"
execute = "anon"
table = "docs"
defaults = { first = 1 }

[functions.doc]
sql = "SELECT * FROM docs WHERE id = :id"
execute = "anon"
table = "docs"
returns = "one"

[functions.docs_raw]
sql = "SELECT id, meta FROM docs WHERE id = :id"
execute = "anon"

[functions.all_secrets]
sql = "SELECT * FROM secrets"
execute = "anon"
table = "secrets"

[functions.retitle]
sql = "UPDATE docs SET title = :title WHERE id = :id"
execute = "anon"
writes = true
returns = "void"

[functions.nothing]
sql = "SELECT 1 AS one"
execute = "anon"
returns = "void"
"""

SDK = {"X-Client-Info": "supabase-js/2.109.0"}


@pytest.fixture
def api(make_app, database_url, tmp_path, anon_key):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        for statement in (
            "CREATE TABLE authors (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL)",
            "CREATE TABLE docs (id INTEGER PRIMARY KEY, author_id INTEGER REFERENCES authors(id), "
            "title VARCHAR(40) NOT NULL, meta JSON, published BOOLEAN NOT NULL)",
            "CREATE TABLE secrets (id INTEGER PRIMARY KEY, body VARCHAR(20))",
            "INSERT INTO authors VALUES (1, 'ann'), (2, 'bob')",
            """INSERT INTO docs VALUES (1, 1, 'one', '{"kind": "memo", "tags": ["a"]}', 1), """
            """(2, 2, 'two', '{"kind": "note"}', 1), (3, 1, 'draft', '{"kind": "memo"}', 0), """
            """(4, 1, 'four', NULL, 1)""",
            "INSERT INTO secrets VALUES (1, 'hush')",
        ):
            connection.execute(sa.text(statement))
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    return Api(make_app(TABLES_CONFIG=str(config), DB_AGGREGATES_ENABLED=True), anon_key)


def test_a_functions_rows_come_back_as_the_tables_json_as_json(api):
    rows = api.get("/rest/v1/rpc/docs_from?first=4").json
    assert rows == [{"id": 4, "author_id": 1, "title": "four", "meta": None, "published": True}]
    assert api.post("/rest/v1/rpc/docs_from", json={"first": 2}).json[-1]["meta"] == {"kind": "note"}
    one = api.post("/rest/v1/rpc/doc", json={"id": 1}).json
    assert one["meta"] == {"kind": "memo", "tags": ["a"]} and one["published"] is True
    assert api.post("/rest/v1/rpc/doc", json={"id": 99}).json is None
    # Without `table`, the statement's values are all it has: on SQLite and MariaDB, JSON is text.
    assert isinstance(api.post("/rest/v1/rpc/docs_raw", json={"id": 1}).json[0]["meta"], str)


def test_the_tables_row_policy_holds_on_a_functions_rows(api, service_key):
    """The function selects the draft (3); the caller's policy on docs does not let anon see it."""
    assert [row["id"] for row in api.get("/rest/v1/rpc/docs_from").json] == [4, 2, 1]  # its order
    assert api.post("/rest/v1/rpc/doc", json={"id": 3}).json is None
    service = Api(api.app, service_key)
    assert [row["id"] for row in service.get("/rest/v1/rpc/docs_from").json] == [4, 3, 2, 1]
    token = api.sign_up()["access_token"]  # user 1: ann, the draft's author
    assert [row["id"] for row in api.get("/rest/v1/rpc/docs_from", token=token).json] == [4, 3, 2, 1]
    # A table the caller may not read is refused through a function as it is directly.
    assert_rest_error(api.get("/rest/v1/rpc/all_secrets"), 401)
    assert service.get("/rest/v1/rpc/all_secrets").json == [{"id": 1, "body": "hush"}]


def test_a_select_with_embeds_filters_order_and_paging_runs_over_a_functions_rows(api):
    response = api.get(
        "/rest/v1/rpc/docs_from?first=2&select=title,kind:meta->>kind,author:authors(name)"
        "&order=title.desc&limit=2&offset=0&author_id=eq.1",
        headers={"Prefer": "count=exact"},
    )
    assert response.status_code == 200, response.json
    assert response.json == [{"title": "four", "kind": None, "author": {"name": "ann"}}]
    assert response.headers["Content-Range"] == "0-0/1"
    inner = api.get("/rest/v1/rpc/docs_from?select=id,authors!inner(name)&authors.name=eq.bob").json
    assert inner == [{"id": 2, "authors": {"name": "bob"}}]
    spread = api.post("/rest/v1/rpc/doc?select=title,...authors(name)", json={"id": 2}).json
    assert spread == {"title": "two", "name": "bob"}
    counted = api.get("/rest/v1/rpc/docs_from?limit=1&offset=1&select=id", headers={"Prefer": "count=exact"})
    assert counted.status_code == 206 and counted.headers["Content-Range"] == "1-1/3"
    assert counted.json == [{"id": 2}]  # the function's own order (id DESC), paged, its key not shown
    csv = api.get("/rest/v1/rpc/docs_from?select=title&first=2", headers={"Accept": "text/csv"})
    assert csv.get_data(as_text=True) == "title\nfour\ntwo"
    head = api.head("/rest/v1/rpc/docs_from?first=2", headers={"Prefer": "count=exact"})
    assert head.status_code == 200 and head.get_data() == b"" and head.headers["Content-Range"] == "0-1/2"
    single = api.get(
        "/rest/v1/rpc/docs_from?first=4", headers={"Accept": "application/vnd.pgrst.object+json"}
    )
    assert single.json["title"] == "four"


def test_aggregates_on_a_functions_rows(api):
    assert api.get("/rest/v1/rpc/docs_from?select=count()").json == [{"count": 3}]
    grouped = api.get("/rest/v1/rpc/docs_from?select=author_id,id.sum()&order=author_id").json
    assert grouped == [{"author_id": 1, "sum": 5}, {"author_id": 2, "sum": 2}]


def test_a_void_function_answers_204_whatever_its_statement_returns(api, service_key):
    """PostgREST answers a function returning void with 204, no Content-Type, no body, and the
    Content-Range of its one (empty) result."""
    response = api.post("/rest/v1/rpc/retitle", json={"id": 1, "title": "uno"})
    assert response.status_code == 204 and response.get_data() == b""
    assert "Content-Type" not in response.headers and response.headers["Content-Range"] == "0-0/*"
    assert Api(api.app, service_key).post("/rest/v1/rpc/doc", json={"id": 1}).json["title"] == "uno"
    for method in ("get", "post"):
        answered = getattr(api, method)("/rest/v1/rpc/nothing", headers={"Prefer": "count=exact"})
        assert answered.status_code == 204 and answered.get_data() == b""
        assert answered.headers["Content-Range"] == "0-0/1"
    strict = {"Prefer": "handling=strict, max-affected=1", **SDK}
    assert api.post("/rest/v1/rpc/nothing", headers=strict).json["code"] == "PGRST128"


@pytest.mark.parametrize(
    ("entry", "words"),
    [('table = "nowhere"', "is not a table of [tables]"),
     ('table = "docs"\nwrites = true', "without writes"),
     ('table = "docs"\nreturns = "scalar"', 'returns = "rows" or "one"'),
     ('returns = "table"', "is not one of rows, one, scalar, void")],
)  # fmt: skip
def test_a_functions_table_must_be_an_exposed_one_it_only_reads(entry, words):
    document = f'[tables.docs]\nselect = "anon"\n[functions.f]\nsql = "SELECT * FROM docs"\n{entry}\n'
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        tables_toml.parse(tomllib.loads(document), "users")


def test_the_openapi_document_says_which_arguments_may_be_left_out_and_what_void_answers(api):
    paths = api.get("/rest/v1/").json["paths"]
    schema = paths["/rest/v1/rpc/docs_from"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "required" not in schema  # `first` has a default
    assert paths["/rest/v1/rpc/docs_from"]["get"]["parameters"][0]["required"] is False
    assert paths["/rest/v1/rpc/doc"]["get"]["parameters"][0]["required"] is True
    assert "204" in paths["/rest/v1/rpc/retitle"]["post"]["responses"]


def test_supabase_js_calls_a_function_of_a_tables_rows(api, anon_key, node_modules):
    base, stop = serve_app(api.app)
    try:
        env = {**os.environ, "MINIBASE_URL": base, "ANON_KEY": anon_key}
        done = subprocess.run(
            ["node", "rpc.mjs"], cwd=node_modules.parent, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        stop()
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["embedded"] == [{"title": "four", "author": {"name": "ann"}}]
    assert out["counted"] == [200, 3, None]
    assert out["got"]["meta"] is None and out["got"]["title"] == "four"
    assert out["voided"] == [204, None, None]
    assert out["missingStatus"] == 400 and out["missing"] == {
        "code": "PGRST202",
        "message": "Could not find the function public.doc without parameters in the schema cache",
        "details": "Searched for the function public.doc without parameters or with a single unnamed "
        "json/jsonb parameter, but no matches were found in the schema cache.",
        "hint": "Perhaps you meant to call the function public.doc(id)",
    }
