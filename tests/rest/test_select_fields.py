"""What a select item can be beyond a column, on both databases: JSON paths (`data->a->>b`), casts
(`id::text`), "quoted" names, one column under two aliases, and aggregates with their grouping
(behind DB_AGGREGATES_ENABLED); JSON paths and quoted names in filters and order too; and the
attacks: injection through a JSON key, a cast name or a quoted name, aggregates over rows or
columns the API hides."""

import re

import pytest
import sqlalchemy as sa

from support import Api, assert_rest_error

TABLES = """
[tables.documents]
select = "anon"
insert = "anon"
update = "anon"
columns = ["id", "data", "category", "amount", "unit price", "owner"]

[tables.documents.policies]
select = "owner <> 'hidden'"

[tables.notes]
select = "anon"
"""

ROWS = [
    (1, '{"color": "red", "size": 5, "tags": ["a", "b"], "dims": {"w": 2, "h": 3}, "who": "ann"}',
     "fruit", 10, 1.5, "ann"),
    (2, '{"color": "green", "size": 12, "tags": ["c"], "dims": {"w": 4, "h": 1}, "who": null}',
     "fruit", 20, 2.25, "bob"),
    (3, '{"color": "red", "size": 7, "tags": [], "dims": {"w": 1, "h": 1}}', "veg", 5, None, "ann"),
    (4, '{"color": "blue", "size": 1}', "veg", None, 3.0, "bob"),
    (5, '{"color": "secret", "size": 99}', "fruit", 1000, 9.0, "hidden"),
]  # fmt: skip


@pytest.fixture
def docs(make_app, database_url, tmp_path, anon_key):
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "CREATE TABLE documents (id INTEGER PRIMARY KEY, data JSON, category VARCHAR(20), "
                'amount INTEGER, "unit price" DOUBLE PRECISION, owner VARCHAR(20), secret VARCHAR(20))'
                if engine.dialect.name == "sqlite"
                else "CREATE TABLE documents (id INTEGER PRIMARY KEY, data JSON, category VARCHAR(20), "
                "amount INTEGER, `unit price` DOUBLE, owner VARCHAR(20), secret VARCHAR(20))"
            )
        )
        connection.execute(sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"))
        connection.execute(sa.text("""INSERT INTO notes VALUES (1, '{"k": "v"}')"""))
        for row in ROWS:
            connection.execute(
                sa.text("INSERT INTO documents (id, data, category, amount, " + _quoted(engine, "unit price")
                        + ", owner, secret) VALUES (:id, :data, :category, :amount, :price, :owner, 's')"),
                dict(zip(("id", "data", "category", "amount", "price", "owner"), row, strict=True)),
            )  # fmt: skip
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)

    def make(**settings):
        return Api(make_app(TABLES_CONFIG=str(config), **settings), anon_key)

    return make


def _quoted(engine, name):
    return f'"{name}"' if engine.dialect.name == "sqlite" else f"`{name}`"


def get(api, **query):
    response = api.get("/rest/v1/documents", query_string=query)
    assert response.status_code == 200, response.json
    return response.json


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("id,data->color", [{"id": 1, "color": "red"}, {"id": 2, "color": "green"}]),
        ("id,data->>color", [{"id": 1, "color": "red"}, {"id": 2, "color": "green"}]),
        ("id,data->size", [{"id": 1, "size": 5}, {"id": 2, "size": 12}]),
        ("id,data->>size", [{"id": 1, "size": "5"}, {"id": 2, "size": "12"}]),
        ("id,data->tags", [{"id": 1, "tags": ["a", "b"]}, {"id": 2, "tags": ["c"]}]),
        ("id,data->tags->0", [{"id": 1, "tags": "a"}, {"id": 2, "tags": "c"}]),
        ("id,data->dims->>w", [{"id": 1, "w": "2"}, {"id": 2, "w": "4"}]),
        ("id,width:data->dims->w", [{"id": 1, "width": 2}, {"id": 2, "width": 4}]),
        ("id,data->dims", [{"id": 1, "dims": {"w": 2, "h": 3}}, {"id": 2, "dims": {"w": 4, "h": 1}}]),
        ("id,data->>who", [{"id": 1, "who": "ann"}, {"id": 2, "who": None}]),
        ("id,data->missing", [{"id": 1, "missing": None}, {"id": 2, "missing": None}]),
        ("id::text", [{"id": "1"}, {"id": "2"}]),
        ("n:id::text,amount::numeric", [{"n": "1", "amount": 10}, {"n": "2", "amount": 20}]),
        ('"unit price"::int', [{"unit price": 2}, {"unit price": 2}]),
        ("data->>size::int", [{"size": 5}, {"size": 12}]),
        ('"unit price"', [{"unit price": 1.5}, {"unit price": 2.25}]),
        ('p:"unit price"', [{"p": 1.5}, {"p": 2.25}]),
        ("a:id,b:id", [{"a": 1, "b": 1}, {"a": 2, "b": 2}]),
    ],
)
def test_computed_select_items(docs, select, expected):
    assert get(docs(), select=select, id="lte.2", order="id") == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"data->>color": "eq.red"}, [1, 3]),
        ({"data->color": 'eq."red"'}, [1, 3]),
        ({"data->size": "eq.12"}, [2]),
        ({"data->>color": "in.(blue,green)"}, [2, 4]),
        ({"data->>color": "like.*e*"}, [1, 2, 3, 4]),
        ({"data->dims->>w": "eq.1"}, [3]),
        ({"data->tags->>0": "eq.a"}, [1]),
        ({"data->>who": "is.null"}, [2, 3, 4]),
        ({"data->>color.eq": "red"}, [1, 3]),
        ({"or": "(data->>color.eq.blue,id.eq.1)"}, [1, 4]),
        ({'"unit price"': "gt.2"}, [2, 4]),
        ({'"unit price".gt': "2"}, [2, 4]),
        ({"data->>color": "eq.red", "order": "data->size.desc"}, [3, 1]),
        ({"order": "data->>color,id.desc"}, [4, 2, 3, 1]),
        ({"order": '"unit price".desc.nullslast'}, [4, 2, 1, 3]),
        ({"data->>color": "match.^(r|b)"}, [1, 3, 4]),
    ],
)
def test_json_paths_and_quoted_names_filter_and_order(docs, query, expected):
    assert [row["id"] for row in get(docs(), select="id", **query)] == expected


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("id::bogus", 'unknown cast "bogus"'),
        ("id::text;drop table documents", "unexpected"),
        ("id::", 'missing type name after "::"'),
        ("data->", 'missing key after "->"'),
        ("data->>a->b", '"->>" must be the last step'),
        ("data->-1", "negative JSON array indexes"),
        ('data->"a\'b"', "invalid JSON key"),
        ('data->"a\\"b"', "invalid JSON key"),
        ('data->"x\\\\"', "invalid JSON key"),
        ("data" + "->a" * 17, "JSON path too long"),
        ('"unterminated', "unterminated quoted name"),
        ('""', "empty quoted name"),
        ('"secret"', "column documents.secret does not exist"),
        ("secret->a", "column documents.secret does not exist"),
        ("id.sum()", "Use of aggregate functions is not allowed"),
        ("count()", "Use of aggregate functions is not allowed"),
    ],
)
def test_malformed_or_hidden_select_items_are_400s(docs, select, message):
    body = assert_rest_error(docs().get("/rest/v1/documents", query_string={"select": select}), 400, select)
    assert message in body["message"], body


@pytest.mark.parametrize(
    "key",
    [
        "data->>'$' OR 1=1 --",
        'data->>"a\') UNION SELECT secret FROM documents --"',
        "data->>a),secret,(b",
        '"id FROM documents; --"',
        '"id` FROM documents; --"',
    ],
)
def test_injection_through_json_keys_and_quoted_names(docs, key):
    api = docs()
    for query in ({"select": key}, {key: "eq.x"}, {"order": key}):
        response = api.get("/rest/v1/documents", query_string=query)
        assert response.status_code in (200, 400), (query, response.json)
        if response.status_code == 400:
            assert_rest_error(response, 400, ",".join([key, *re.split(r'->>?|"', key)]))
        else:
            assert "s" not in [value for row in response.json for value in row.values()], response.json


def test_aggregates_need_the_setting(docs):
    body = assert_rest_error(docs().get("/rest/v1/documents?select=amount.sum()"), 400)
    assert body["message"] == "Use of aggregate functions is not allowed"
    assert (
        docs(REST_ERROR_CODES="postgrest").get("/rest/v1/documents?select=count()").json["code"] == "PGRST123"
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"select": "count()"}, [{"count": 4}]),
        ({"select": "amount.sum()"}, [{"sum": 35}]),
        ({"select": "total:amount.sum(),amount.max(),amount.min()"}, [{"total": 35, "max": 20, "min": 5}]),
        ({"select": "amount.avg()::int"}, [{"avg": 12}]),
        ({"select": "amount.count()"}, [{"count": 3}]),
        (
            {"select": "category,amount.sum(),count()"},
            [{"category": "fruit", "sum": 30, "count": 2}, {"category": "veg", "sum": 5, "count": 2}],
        ),
        (
            {"select": "category,amount.sum()", "order": "category.desc"},
            [{"category": "veg", "sum": 5}, {"category": "fruit", "sum": 30}],
        ),
        (
            {"select": "category,count()", "data->>color": "eq.red"},
            [{"category": "fruit", "count": 1}, {"category": "veg", "count": 1}],
        ),
        (
            {"select": "data->>color,count()", "order": "data->>color"},
            [{"color": "blue", "count": 1}, {"color": "green", "count": 1}, {"color": "red", "count": 2}],
        ),
        ({"select": "data->size::int.sum()"}, [{"sum": 25}]),
        ({"select": '"unit price".max()'}, [{"max": 3.0}]),
        ({"select": "owner,amount.sum()", "owner": "eq.hidden"}, []),
    ],  # fmt: skip
)
def test_aggregates_group_by_the_plain_columns_under_the_row_policy(docs, query, expected):
    """The hidden row (amount 1000) is never summed: the policy is in the aggregate's WHERE."""
    assert get(docs(DB_AGGREGATES_ENABLED=True), **query) == expected


def test_aggregate_counts_groups_and_pages_them(docs):
    api = docs(DB_AGGREGATES_ENABLED=True)
    response = api.get(
        "/rest/v1/documents",
        query_string={"select": "category,count()", "limit": "1"},
        headers={"Prefer": "count=exact"},
    )
    assert response.status_code == 206 and response.headers["Content-Range"] == "0-0/2"
    assert response.json == [{"category": "fruit", "count": 2}]


@pytest.mark.parametrize(
    "select",
    ["secret.sum()", "secret.count()", "x:secret->a.max()"],
)
def test_an_aggregate_on_a_column_the_api_hides_is_unknown(docs, select):
    body = assert_rest_error(
        docs(DB_AGGREGATES_ENABLED=True).get(f"/rest/v1/documents?select={select}"), 400, select
    )
    assert "column documents.secret does not exist" in body["message"]


def test_aggregates_are_refused_where_they_do_not_apply(docs):
    api = docs(DB_AGGREGATES_ENABLED=True)
    response = api.post(
        "/rest/v1/documents?select=amount.sum()",
        json={"id": 9, "data": {}, "category": "x", "amount": 1, "owner": "ann"},
        headers={"Prefer": "return=representation"},
    )
    body = assert_rest_error(response, 400)
    assert "aggregate sum() is not supported here" in body["message"]
    assert api.get("/rest/v1/documents?id=eq.9").json == []


def test_json_paths_and_casts_on_written_rows(docs):
    api = docs()
    response = api.post(
        "/rest/v1/documents?select=id::text,data->>color,data->size",
        json={"id": 9, "data": {"color": "pink", "size": 3}, "category": "x", "amount": 1, "owner": "ann"},
        headers={"Prefer": "return=representation"},
    )
    assert response.status_code == 201 and response.json == [{"id": "9", "color": "pink", "size": 3}]
    response = api.patch(
        "/rest/v1/documents?id=eq.9&select=a:id,b:id,data->>color",
        json={"data": {"color": "teal"}},
        headers={"Prefer": "return=representation"},
    )
    assert response.status_code == 200 and response.json == [{"a": 9, "b": 9, "color": "teal"}]


NO_OPERATOR = (
    "No operator matches the given name and argument types. You might need to add explicit type casts."
)


@pytest.mark.parametrize(
    "path, query, message",
    [
        ("documents", {"select": "id,category->>x"}, "character varying ->> unknown"),
        ("documents", {"select": "id,c:category->x->>y"}, "character varying -> unknown"),
        ("documents", {"category->>x": "eq.1"}, "character varying ->> unknown"),
        ("documents", {"or": "(category->>x.eq.1,id.eq.1)"}, "character varying ->> unknown"),
        ("documents", {"order": "category->>x"}, "character varying ->> unknown"),
        ("documents", {"select": "amount->>x::int"}, "integer ->> unknown"),
        ("notes", {"select": "id,body->>k"}, "text ->> unknown"),
        ("notes", {"select": "id", "body->k": "eq.1"}, "text -> unknown"),
    ],
)
def test_a_json_path_into_a_column_that_is_not_json_is_postgresqls_42883(docs, path, query, message):
    """PostgreSQL has no -> or ->> on text (PostgREST answers its 42883 with a 404): refused before
    any SQL on both databases, where SQLite stopped on the first value that was not JSON (a 503)
    and MariaDB answered null."""
    response = docs(REST_ERROR_CODES="postgrest").get(f"/rest/v1/{path}", query_string=query)
    assert response.status_code == 404, response.json
    body = response.json
    assert (body["code"], body["message"], body["hint"]) == (
        "42883",
        f"operator does not exist: {message}",
        NO_OPERATOR,
    )


def test_a_json_column_holding_text_that_is_not_json(docs, database_url):
    """SQLite keeps any text in a JSON column (MariaDB's CHECK refuses it): a path into it is null,
    as MariaDB's JSON_EXTRACT answers for text that is not JSON, never a failed query."""
    if not database_url.startswith("sqlite"):
        pytest.skip("MariaDB and MySQL keep a JSON column's values valid JSON")
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("INSERT INTO documents (id, data, owner) VALUES (6, 'not {json', 'ann')"))
    engine.dispose()
    api = docs()
    assert get(api, select="id,data->>color,data->dims", id="gte.4") == [
        {"id": 4, "color": "blue", "dims": None}, {"id": 6, "color": None, "dims": None}
    ]  # fmt: skip
    assert get(api, select="id", **{"data->>color": "is.null"}) == [{"id": 6}]
    assert get(api, select="id", **{"data->>color": "eq.red"}) == [{"id": 1}, {"id": 3}]
    assert get(api, select="id", order="data->>color.desc,id", id="gte.3") == [
        {"id": 6},
        {"id": 3},
        {"id": 4},
    ]


def test_casts_and_paths_inside_embeds(rest):
    rest.execute(
        rest.table("children").insert().values([{"item_id": 1, "label": "x"}, {"item_id": 1, "label": "y"}])
    )
    response = rest.anon.get(
        "/rest/v1/items", query_string={"select": "n:id::text,children(id::text,label)", "id": "eq.1"}
    )
    assert response.status_code == 200, response.json
    assert response.json == [{"n": "1", "children": [{"id": "1", "label": "x"}, {"id": "2", "label": "y"}]}]
    response = rest.anon.get("/rest/v1/children", query_string={"select": "a:id,b:id,items(name,price::int)"})
    assert response.json[0] == {"a": 1, "b": 1, "items": {"name": "Apple", "price": 2}}
