"""Table API errors: unknown names, malformed queries, injection attempts, and a schema
that changes while the service runs. No error body carries SQL or the database's text."""

import collections
import json
import random

import pytest
import sqlalchemy as sa

from database import failures
from rest import reflection
from support import Api, assert_rest_error


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("/rest/v1/itemz", "Perhaps you meant the table 'public.items'"),
        ("/rest/v1/note", "Perhaps you meant the table 'public.notes'"),
        ("/rest/v1/users", None),
        ("/rest/v1/minibase_sessions", None),
        ("/rest/v1/minibase_alembic_version", None),
        ("/rest/v1/Items", "Perhaps you meant the table 'public.items'"),
        ("/rest/v1/items;drop table items", None),
        ("/rest/v1/items%60%3B%20drop%20table%20items", None),
        ("/rest/v1/items%27", "Perhaps you meant the table 'public.items'"),
        ("/rest/v1/" + "x" * 500, None),
    ],
)
def test_unknown_table_is_a_404_with_the_nearest_name(rest_reads, path, hint):
    body = assert_rest_error(rest_reads.service.get(path), 404)
    assert body["hint"] == hint
    assert len(rest_reads.rows("items")) == 5


def test_listed_table_missing_from_the_database_is_a_404(rest):
    for method in ("get", "post", "patch", "delete"):
        query = "" if method == "post" else "?id=eq.1"
        assert_rest_error(getattr(rest.service, method)(f"/rest/v1/gone{query}", json={"a": 1}), 404)


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("select=id,colour", "colour"),
        ("select=label:colour", "colour"),
        ("colour=eq.red", "colour"),
        ("colour.eq=red", "colour"),
        ("or=(id.eq.1,colour.eq.red)", "colour"),
        ("order=colour.desc", "colour"),
        ("order=id,colour", "colour"),
    ],
)
def test_unknown_column_in_a_read_is_a_400_naming_it(rest, query, name):
    body = assert_rest_error(rest.anon.get(f"/rest/v1/items?{query}"), 400)
    assert body["message"] == f"column items.{name} does not exist"  # PostgreSQL's 42703


@pytest.mark.parametrize(
    ("method", "path", "body", "name"),
    [
        ("post", "/rest/v1/items", {"name": "x", "colour": 1}, "colour"),
        ("post", "/rest/v1/items?on_conflict=colour", {"name": "x"}, "colour"),
        ("post", "/rest/v1/items?columns=name,colour", {"name": "x"}, "colour"),
        ("post", "/rest/v1/items?select=id,colour", {"name": "x"}, "colour"),
        ("patch", "/rest/v1/items?colour=eq.1", {"name": "x"}, "colour"),
        ("patch", "/rest/v1/items?id=eq.1", {"colour": "x"}, "colour"),
        ("delete", "/rest/v1/items?colour=eq.1", None, "colour"),
    ],
)
def test_unknown_column_in_a_write_is_a_400_naming_it(rest, method, path, body, name):
    headers = {"Prefer": "return=representation,resolution=merge-duplicates"}
    response = getattr(rest.anon, method)(path, json=body, headers=headers)
    message = assert_rest_error(response, 400)["message"]
    if "colour" in (body or {}) or "columns=" in path:  # PostgREST's PGRST204
        assert message == f"Could not find the '{name}' column of 'items' in the schema cache"
    else:
        assert message == f"column items.{name} does not exist"
    assert rest.rows("items")[0]["name"] == "Apple" and len(rest.rows("items")) == 5


@pytest.mark.parametrize("method", ["post", "patch", "delete"])
def test_select_is_checked_on_every_write(rest, method):
    query = "select=colour" if method == "post" else "id=eq.1&select=colour"
    response = getattr(rest.anon, method)(f"/rest/v1/items?{query}", json={"name": "x"})
    assert assert_rest_error(response, 400)["message"] == "column items.colour does not exist"
    assert rest.rows("items")[0]["name"] == "Apple" and len(rest.rows("items")) == 5


@pytest.mark.parametrize(
    ("query", "part"),
    [
        ("id=foo.1", "foo"),
        ("id=eq", "eq"),
        ("id=", "id"),
        ("id.foo=1", "foo"),
        ("id=cs.{1}", "cs"),
        ("or=id.eq.1", "or"),
        ("or=(id.eq.1", "or"),
        ("or=(id.eq.1))", "or"),
        ("or=()", "or"),
        ("and=(id.eq.1,nope)", "and"),
        ("id=in.(1,2", "in"),
        ("id.in=1,2", "in"),
        ("active=is.maybe", "is"),
        ("name=like.abc\\", "name"),
        ("order=id.sideways", "sideways"),
        ("order=id.asc.desc", "desc"),
        ("order=", "order"),
        ("select=id,,name", "select"),
        ("select=id,children(*", "select"),
        ("select=id::bogus", "select"),
        ("or=" + "(" * 40 + "id.eq.1" + ")" * 40, "or"),
    ],
)
def test_malformed_queries_are_a_400_naming_the_part(rest_reads, query, part):
    body = assert_rest_error(rest_reads.anon.get(f"/rest/v1/items?{query}"), 400)
    assert part in body["message"], body


def test_a_bad_alias_is_a_400_naming_it(rest):
    body = assert_rest_error(rest.anon.get("/rest/v1/items?select=bad-alias:id"), 400, "select item")
    assert '"bad-alias"' in body["message"]


@pytest.mark.parametrize(
    ("query", "column"),
    [
        ("id=eq.abc", "id"),
        ("id=eq.1 or 1=1", "id"),
        ("id.in=[1,x]", "id"),
        ("price=gt.cheap", "price"),
        ("created=gt.notadate", "created"),
        ("active=eq.maybe", "active"),
        ("qty=lt.1e999", "qty"),
        ("id=eq." + "9" * 40, "id"),
    ],
)
def test_values_that_do_not_convert_are_a_400_naming_the_column(rest, query, column):
    body = assert_rest_error(rest.anon.get(f"/rest/v1/items?{query}"), 400)
    assert f'"{column}"' in body["message"]


INJECTIONS = [
    "id;drop table items",
    "id; DROP TABLE items; --",
    "id`; drop table items; -- ",
    'id"; drop table items; --',
    "id' or '1'='1",
    "1 or 1=1",
    "(select password from users)",
    "name`,`id",
    "*,(select 1)",
]


@pytest.mark.parametrize("attempt", INJECTIONS)
@pytest.mark.parametrize(
    "place", ["select", "order", "filter column", "dotted column", "body key", "on_conflict"]
)
def test_injection_in_names_is_a_400_and_harmless(rest_reads, attempt, place):
    if place == "select":
        response = rest_reads.anon.get("/rest/v1/items", query_string={"select": attempt})
    elif place == "order":
        response = rest_reads.anon.get("/rest/v1/items", query_string={"order": attempt})
    elif place == "filter column":
        response = rest_reads.anon.get("/rest/v1/items", query_string={attempt: "eq.1"})
    elif place == "dotted column":
        response = rest_reads.anon.get("/rest/v1/items", query_string={f"{attempt}.eq": "1"})
    elif place == "body key":
        response = rest_reads.anon.post("/rest/v1/items", json={"name": "x", attempt: 1})
    else:
        response = rest_reads.anon.post(
            "/rest/v1/items",
            query_string={"on_conflict": attempt},
            json={"name": "x"},
            headers={"Prefer": "resolution=merge-duplicates"},
        )
    assert_rest_error(response, 400, attempt)
    assert [row["name"] for row in rest_reads.rows("items")] == [row["name"] for row in rest_reads.seeded]


@pytest.mark.parametrize(
    "value",
    ["x' or '1'='1", 'x" or "1"="1', "x` or 1=1 -- ", "'; drop table items; --", "\\'", "%' or 1=1 #"],
)
def test_injection_in_values_matches_nothing_and_changes_nothing(rest, value):
    assert rest.ids(rest.anon.get("/rest/v1/items", query_string={"name": f"eq.{value}"})) == []
    assert rest.ids(rest.anon.get("/rest/v1/items", query_string={"name": f"like.{value}"})) == []
    quoted = value.replace("\\", "\\\\").replace('"', '\\"')
    assert (
        rest.ids(rest.anon.get("/rest/v1/items", query_string={"or": f'(name.eq."{quoted}",id.eq.0)'})) == []
    )
    assert (
        rest.anon.patch("/rest/v1/items", query_string={"name": f"eq.{value}"}, json={"qty": 0}).status_code
        == 204
    )
    response = rest.anon.post(
        "/rest/v1/items", json={"name": value}, headers={"Prefer": "return=representation"}
    )
    assert response.status_code == 201 and response.json[0]["name"] == value
    assert rest.ids(rest.anon.get("/rest/v1/items", query_string={"name": f"eq.{value}"})) == [6]
    assert [row["qty"] for row in rest.rows("items")][:5] == [row["qty"] for row in rest.seeded]


def test_database_errors_carry_no_database_text(rest):
    for response, status in (
        (rest.anon.post("/rest/v1/items", json={"id": 1, "name": "dup"}), 409),  # unique
        (rest.anon.post("/rest/v1/items", json={"name": None}), 400),  # not null
        (rest.anon.post("/rest/v1/children", json={"item_id": 12345}), 409),  # foreign key
        (rest.anon.post("/rest/v1/items", json={"name": "x", "qty": -1}), 400),  # check
    ):
        body = assert_rest_error(response, status)
        text = str(body).lower()
        for leak in ("constraint failed", "duplicate entry", "cannot be null", "12345", "errno", "sql"):
            assert leak not in text


@pytest.mark.parametrize(
    ("query", "refused_by"),
    [
        ({"name": "like." + "a" * 60_000}, "sqlite"),  # past SQLite's LIKE pattern length
        ({"name": "match.\\u0041"}, "mysql"),  # \u is Python's, not MariaDB's PCRE
        ({"name": "match.a{1,70000}"}, "mysql"),  # past PCRE's repeat count
    ],
)
def test_a_query_the_database_refuses_is_a_400_not_a_503(rest, query, refused_by):
    """The database answered: it refused what the query asked. A 503 would tell the client the
    database is down (and to try again); PostgREST answers a database error it has no status for
    with a 400."""
    response = rest.anon.get("/rest/v1/items", query_string=query)
    if rest.engine.dialect.name != refused_by:
        assert response.status_code == 200, response.json
        return
    body = assert_rest_error(response, 400)
    assert body["message"] == "The database could not run this query"


def test_only_a_database_that_does_not_answer_is_unavailable(tmp_path):
    """failures.unavailable on real SQLite errors: a statement refused is not an outage, a file
    that cannot be opened is."""
    refused = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with pytest.raises(sa.exc.OperationalError) as bad_statement:
        with refused.connect() as connection:
            connection.execute(sa.text("SELECT 'x' -> '$.a'"))
    gone = sa.create_engine(f"sqlite:///{tmp_path / 'missing' / 'db.sqlite'}")
    with pytest.raises(sa.exc.OperationalError) as no_file:
        gone.connect()
    assert not failures.unavailable(bad_statement.value)
    assert failures.unavailable(no_file.value)
    refused.dispose()
    gone.dispose()


def test_a_table_created_at_runtime_is_found(rest, monkeypatch):
    assert_rest_error(rest.anon.get("/rest/v1/gone"), 404)
    gone = sa.Table("gone", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    gone.create(rest.engine)
    rest.execute(gone.insert().values(id=7))
    assert_rest_error(rest.anon.get("/rest/v1/gone"), 404)  # not looked up again within REFRESH_INTERVAL
    monkeypatch.setattr(reflection, "REFRESH_INTERVAL", 0)
    assert rest.anon.get("/rest/v1/gone").json == [{"id": 7}]


def test_a_column_added_at_runtime_is_found(rest, monkeypatch):
    assert rest.ids(rest.anon.get("/rest/v1/items?limit=1")) == [1]
    rest.execute(sa.text("ALTER TABLE items ADD COLUMN colour VARCHAR(20)"))
    assert_rest_error(rest.anon.get("/rest/v1/items?select=colour"), 400)
    monkeypatch.setattr(reflection, "REFRESH_INTERVAL", 0)
    assert rest.anon.patch("/rest/v1/items?id=eq.1", json={"colour": "red"}).status_code == 204
    assert rest.anon.get("/rest/v1/items?select=id,colour&colour=eq.red").json == [{"id": 1, "colour": "red"}]
    assert "colour" in rest.anon.get("/rest/v1/items?limit=1").json[0]


def test_a_column_dropped_at_runtime_is_forgotten(rest):
    assert "note" in rest.anon.get("/rest/v1/items?limit=1").json[0]
    rest.execute(sa.text("ALTER TABLE items DROP COLUMN note"))
    response = rest.anon.get("/rest/v1/items?limit=1")
    assert response.status_code == 200 and "note" not in response.json[0]
    assert rest.anon.post("/rest/v1/items", json={"name": "x"}).status_code == 201
    assert_rest_error(rest.anon.get("/rest/v1/items?select=note"), 400)


def test_a_table_dropped_at_runtime_is_a_404(rest):
    assert rest.anon.get("/rest/v1/pairs").status_code == 200
    rest.execute(sa.text("DROP TABLE pairs"))
    assert_rest_error(rest.anon.get("/rest/v1/pairs"), 404)


def test_metadata_is_reflected_once(rest, monkeypatch):
    rest.anon.get("/rest/v1/items")
    calls = []
    monkeypatch.setattr(reflection, "_reflect", lambda name: calls.append(name))
    for _ in range(3):
        assert rest.anon.get("/rest/v1/items?select=id,name&name=eq.x&order=price").status_code == 200
    assert calls == []


def test_an_owner_column_missing_from_the_table_is_a_server_error_not_a_leak(make_rest, tmp_path, caplog):
    config = tmp_path / "broken.toml"
    config.write_text('[tables.items]\nselect = "owner"\nowner_column = "owner_id"\n')
    broken = make_rest(TABLES_CONFIG=str(config))
    token = broken.anon.sign_up(email="c@example.com")["access_token"]
    body = assert_rest_error(broken.anon.get("/rest/v1/items", token=token), 500)
    assert "owner_id" not in body["message"] and "owner_id" in caplog.text


COLUMNS = ["id", "name", "price", "qty", "active", "created", "code", "note", "nope", ""]
OPERATORS = ["eq", "neq", "gt", "lte", "like", "ilike", "in", "is", "not.eq", "not.in", "cs", "x", ""]
VALUES = ["1", "-1", "2.5", "abc", "null", "true", "false", "2024-01-01T10:00:00Z", "", "a*", "%", "\\",
          '"x,y"', "(1,2)", "[1,2]", "()", "(", "1e400", "9" * 25, "'", "`", "\x00", "é"]  # fmt: skip
PREFER = ["return=representation", "return=headers-only", "count=exact", "resolution=merge-duplicates",
          "resolution=ignore-duplicates", "missing=default", "return=", "x"]  # fmt: skip


def random_request(rng):
    """A request built from pieces of valid and broken syntax: (method, path, query, headers, body)."""
    pick = rng.choice
    query = []
    for _ in range(rng.randint(0, 4)):
        column, operator, value = pick(COLUMNS), pick(OPERATORS), pick(VALUES)
        query.append(
            pick(
                [
                    (column, f"{operator}.{value}"),
                    (f"{column}.{operator}", value),
                    (
                        pick(["or", "and", "not.or"]),
                        f"({column}.{operator}.{value},{pick(COLUMNS)}.eq.{value})",
                    ),
                    ("order", f"{column}.{pick(['asc', 'desc', 'nullsfirst', 'up', ''])}"),
                    ("select", ",".join(rng.sample(COLUMNS, 2)) + pick(["", ",a:id", ",*", ",(x)"])),
                    (pick(["limit", "offset", "columns", "on_conflict"]), pick(VALUES + COLUMNS)),
                    (value + column, operator + value),
                ]
            )
        )
    headers = {"Prefer": ",".join(rng.sample(PREFER, rng.randint(0, 3)))}
    headers["Accept"] = pick(
        ["application/json", "text/csv", "application/vnd.pgrst.object+json", "x/y", "*/*"]
    )
    if rng.random() < 0.2:
        headers["Range"] = pick(["0-1", "2-", "5-1", "x", "1-2-3", "-"])
    method = pick(["get", "get", "head", "post", "patch", "delete"])
    body = None
    if method in ("post", "patch"):

        def row():
            if rng.random() < 0.5:
                return {"name": pick(["a", "b"]), "qty": pick([1, 2, None]), "code": pick(["A1", "Z9", None])}
            values = [None, 0, -3, 2.5, 10**30, "x", "A1", "2024-01-01", True, [1], {"a": 1}, float("inf")]
            return {column: pick(values) for column in rng.sample(COLUMNS, rng.randint(0, 3))}

        body = pick([json.dumps(row()), json.dumps([row(), row()]), json.dumps([row()] * 2), pick(VALUES)])
    path = "/rest/v1/" + pick(
        ["items", "items", "events", "pairs", "children", "notes", "gone", "x y", "items%00"]
    )
    return method, path, query, headers, body


def test_no_request_is_a_server_error(rest):
    rng = random.Random(20261122)
    statuses = collections.Counter()
    for _ in range(1500):
        method, path, query, headers, body = random_request(rng)
        response = getattr(rest.anon, method)(
            path, query_string=query, headers=headers, data=body, content_type="application/json"
        )
        statuses[response.status_code] += 1
        assert response.status_code < 500, (
            method,
            path,
            query,
            headers,
            body,
            response.get_data(as_text=True),
        )
        if response.status_code >= 400 and method != "head":
            assert set(response.get_json()) == {"message", "code", "hint", "details"}
    assert statuses[200] > 20 and statuses[400] > 500


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_table_the_database_has_no_room_for_is_a_503_not_a_400(make_app, anon_key, database_url, tmp_path):
    """MariaDB's "table is full" (1114): here a MEMORY table at its max_heap_table_size, which is
    also what InnoDB says of a tablespace on a full disk. The database's want of room is no fault
    of the request: a 503, as PostgREST answers PostgreSQL's insufficient resources, and the rows
    that fitted are all there."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("SET SESSION max_heap_table_size = 16384")  # MariaDB's least
        connection.exec_driver_sql(
            "CREATE TABLE memory_notes (id INT PRIMARY KEY, note VARCHAR(200) NOT NULL) ENGINE=MEMORY"
        )
    config = tmp_path / "memory.toml"
    config.write_text('[tables.memory_notes]\nselect = "anon"\ninsert = "anon"\n')
    api = Api(make_app(TABLES_CONFIG=str(config)), anon_key)
    for n in range(1, 1000):
        response = api.post("/rest/v1/memory_notes", json={"id": n, "note": "x" * 200})
        if response.status_code != 201:
            break
    body = assert_rest_error(response, 503)
    assert body["code"] == 503 and n > 1
    assert len(api.get("/rest/v1/memory_notes?select=id").json) == n - 1
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE memory_notes")
    engine.dispose()
