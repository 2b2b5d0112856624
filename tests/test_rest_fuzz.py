"""Whatever a client sends to the table API, on either database, the answer is a documented 4xx (or a
2xx), never a 5xx: any body, any query string, any value in any column."""

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import Api

TEXT = st.text(st.characters(exclude_categories=()), max_size=60)  # lone surrogates included
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT | st.text(max_size=300),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)
COLUMNS = ["id", "name", "qty", "price", "flag", "born", "nope"]
rows = st.dictionaries(st.sampled_from(COLUMNS), json_values, min_size=1, max_size=4)
bodies = st.one_of(json_values, rows, st.lists(rows, max_size=3))
OPERATORS = ["eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "in", "is", "not.eq", "fts", ""]
# A query string is bytes on the wire: no lone surrogates there (a client cannot encode one).
QUERY_TEXT = st.text(max_size=60)
filters = st.tuples(
    st.sampled_from(COLUMNS + ["or", "and", "select", "order", "limit", "offset"]), QUERY_TEXT
)
native = st.tuples(st.sampled_from(COLUMNS), st.sampled_from(OPERATORS), QUERY_TEXT).map(
    lambda f: (f[0], f"{f[1]}.{f[2]}" if f[1] else f[2])
)
queries = st.lists(filters | native, max_size=4)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def fuzzed(make_app, service_key, database_url, tmp_path):
    engine = sa.create_engine(database_url)
    sa.Table(
        "things",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(40), nullable=False, unique=True),
        sa.Column("qty", sa.SmallInteger),
        sa.Column("price", sa.Numeric(8, 2)),
        sa.Column("flag", sa.Boolean),
        sa.Column("born", sa.DateTime),
    ).create(engine)
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text('[tables.things]\nselect = "anon"\ninsert = "anon"\nupdate = "anon"\ndelete = "anon"\n')
    return Api(make_app(TABLES_CONFIG=str(config)), service_key)


def check(response):
    assert response.status_code < 500, response.get_data(as_text=True)[:500]
    if response.status_code >= 400:
        assert response.is_json and set(response.json) == {"message", "code", "hint", "details"}


@FUZZ
@given(method=st.sampled_from(["POST", "PATCH"]), body=bodies, query=queries)
def test_any_body_and_query_on_writes(fuzzed, method, body, query):
    headers = {"Prefer": "return=representation"}
    query = query if method == "PATCH" else []
    check(fuzzed.request(method, "/rest/v1/things", json=body, query_string=query, headers=headers))


@FUZZ
@given(query=queries, raw=st.binary(max_size=100))
def test_any_query_on_reads_and_deletes_and_any_bytes(fuzzed, query, raw):
    check(fuzzed.get("/rest/v1/things", query_string=query))
    check(fuzzed.delete("/rest/v1/things", query_string=query))
    check(fuzzed.post("/rest/v1/things", data=raw, headers={"Content-Type": "application/json"}))
