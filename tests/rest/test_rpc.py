"""Functions of tables.toml at /rest/v1/rpc/{name}, on both databases: arguments from a body or a
query string, :uid, the execute rule, rows shaped as a table's, one and scalar results, read-only
functions that cannot change data, and functions that may."""

import pytest

from support import assert_rest_error, serve_app

SDK = {"X-Client-Info": "supabase-js/2.109.0"}

FUNCTIONS = """
[functions.cheaper_than]
sql = "SELECT id, name, price FROM items WHERE price < :max_price ORDER BY id"
execute = "anon"

[functions.item_count]
sql = "SELECT COUNT(*) AS n FROM items"
execute = "anon"
returns = "scalar"

[functions.item_named]
sql = "SELECT id, name FROM items WHERE name = :name"
execute = "anon"
returns = "one"

[functions.whoami]
sql = "SELECT :uid AS uid"
execute = "authenticated"
returns = "scalar"

[functions.sneaky]
sql = "DELETE FROM items WHERE id = :id"
execute = "anon"

[functions.restock]
sql = "UPDATE items SET qty = :qty WHERE name = :name"
execute = "service_role"
writes = true

[functions.secret]
sql = "SELECT 1 AS one"

[functions.second_of]
sql = "SELECT CAST(json_extract(:ids, '$[1]') AS SIGNED) + CAST(json_extract(:o, '$.add') AS SIGNED) AS n"
execute = "anon"
returns = "scalar"

[functions.described]
sql = "SELECT :val AS val, :param AS param, :name AS name"
execute = "anon"
returns = "one"

[functions.cheapest]
sql = "SELECT id FROM items WHERE price < :max_price ORDER BY id"
execute = "anon"
defaults = { max_price = 2.5 }
"""


@pytest.fixture
def rest(make_rest, tables_toml, tmp_path):
    config = tmp_path / "with-functions.toml"
    config.write_text(tables_toml + FUNCTIONS)
    return make_rest(TABLES_CONFIG=str(config))


def test_arguments_from_a_body_or_a_query_string(rest):
    posted = rest.anon.post("/rest/v1/rpc/cheaper_than", json={"max_price": 3})
    assert posted.status_code == 200
    assert [row["name"] for row in posted.json] == ["Apple", "Date"]
    assert rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=3").json == posted.json


def test_a_rows_result_is_shaped_as_a_tables(rest):
    shaped = rest.anon.get(
        "/rest/v1/rpc/cheaper_than?max_price=100&select=name&price=gte.2&order=price.desc&offset=1",
        headers={"Prefer": "count=exact"},
    )
    assert shaped.status_code == 206 and shaped.headers["Content-Range"] == "1-2/3"
    assert shaped.json == [{"name": "apple pie"}, {"name": "Date"}]
    dotted = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=100&price.lt=2&select=id")
    assert dotted.json == [{"id": 1}]
    one = rest.anon.get(
        "/rest/v1/rpc/cheaper_than?max_price=100&name=eq.Date",
        headers={"Accept": "application/vnd.pgrst.object+json"},
    )
    assert one.json == {"id": 5, "name": "Date", "price": 2.0}
    csv = rest.anon.get(
        "/rest/v1/rpc/cheaper_than?max_price=100&select=name&limit=1", headers={"Accept": "text/csv"}
    )
    assert csv.get_data(as_text=True).splitlines() == ["name", "Apple"]
    assert_rest_error(rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=100&select=colour"), 400)


def test_scalar_one_and_uid(rest):
    assert rest.anon.post("/rest/v1/rpc/item_count").json == 5
    assert rest.anon.post("/rest/v1/rpc/item_named", json={"name": "Banana"}).json["name"] == "Banana"
    assert rest.anon.post("/rest/v1/rpc/item_named", json={"name": "nothing"}).json is None
    token = rest.anon.sign_up()["access_token"]
    assert int(rest.anon.post("/rest/v1/rpc/whoami", token=token).json) == 1


SEARCHED = "Searched for the function public.cheaper_than"
NOT_CACHED = ", but no matches were found in the schema cache."
JSON_TOO = " or with a single unnamed json/jsonb parameter"


@pytest.mark.parametrize(
    ("method", "query", "body", "message", "details", "hint"),
    [("post", "", {}, "public.cheaper_than without parameters",
      f"{SEARCHED} without parameters{JSON_TOO}{NOT_CACHED}", None),
     ("post", "", {"max_price": 1, "maxprice": 2}, "public.cheaper_than(max_price, maxprice)",
      f"{SEARCHED} with parameters max_price, maxprice{JSON_TOO}{NOT_CACHED}",
      "Perhaps you meant to call the function public.cheaper_than(max_price)"),
     ("get", "?maxprice=3", None, "public.cheaper_than(maxprice)",
      f"{SEARCHED} with parameter maxprice{NOT_CACHED}",
      "Perhaps you meant to call the function public.cheaper_than(max_price)"),
     ("get", "?max_price=3&colour=red&uid=1", None, "public.cheaper_than(colour, max_price, uid)",
      f"{SEARCHED} with parameters colour, max_price, uid{NOT_CACHED}",
      "Perhaps you meant to call the function public.cheaper_than(max_price)"),
     ("get", "", None, "public.cheaper_than without parameters", f"{SEARCHED} without parameters{NOT_CACHED}",
      None)],
)  # fmt: skip
def test_arguments_the_function_does_not_take_are_a_400_in_postgrests_words(
    rest, method, query, body, message, details, hint
):
    """A missing argument without a default, or one the function does not take (`uid` among them: the
    caller's id is never an argument), is a 400 naming them, in PostgREST's words exactly, as its test
    suite (RpcSpec) has them; filters on the rows (`colour=red` has no operator, so it is an
    argument) are told apart as PostgREST does."""
    response = getattr(rest.anon, method)(f"/rest/v1/rpc/cheaper_than{query}", json=body, headers=SDK)
    assert response.status_code == 400
    assert response.json == {
        "code": "PGRST202",
        "message": f"Could not find the function {message} in the schema cache",
        "details": details,
        "hint": hint,
    }
    assert_rest_error(rest.anon.post("/rest/v1/rpc/cheaper_than", data=b"[1"), 400)


@pytest.mark.parametrize(
    ("given", "hint"),
    [({"val": 1, "param": 2}, "(name, param, val)"),  # one missing
     ({"val": 1, "param": 2, "name": 3, "extra": 4}, "(name, param, val)"),  # one too many
     ({"vall": 1, "pqaram": 2, "nam": 3}, "(name, param, val)"),  # each misspelled
     ({"noclosealternative": 1}, None)],
)  # fmt: skip
def test_the_hint_names_the_functions_own_parameters_as_postgrest_does(rest, given, hint):
    """PostgREST's noRpcHint (its doctests' cases): the function's parameters sorted, when they are
    near enough to the arguments given; checked through a real request, POST and GET alike."""
    expected = hint and f"Perhaps you meant to call the function public.described{hint}"
    posted = rest.anon.post("/rest/v1/rpc/described", json=given, headers=SDK)
    assert posted.status_code == 400 and posted.json["code"] == "PGRST202"
    assert posted.json["hint"] == expected
    query = "&".join(f"{name}={value}" for name, value in given.items())
    assert rest.anon.get(f"/rest/v1/rpc/described?{query}", headers=SDK).json["hint"] == expected
    good = rest.anon.post("/rest/v1/rpc/described", json={"val": 1, "param": 2, "name": 3})
    assert good.status_code == 200


def test_an_unknown_function_is_a_404_naming_the_nearest(rest):
    response = rest.anon.post("/rest/v1/rpc/cheaper_then", json={"max_price": 1}, headers=SDK)
    assert response.status_code == 404 and response.json == {
        "code": "PGRST202",
        "message": "Could not find the function public.cheaper_then(max_price) in the schema cache",
        "details": "Searched for the function public.cheaper_then with parameter max_price or with a single "
        "unnamed json/jsonb parameter, but no matches were found in the schema cache.",
        "hint": "Perhaps you meant to call the function public.cheaper_than",
    }
    far = rest.anon.get("/rest/v1/rpc/nope?a=1&name=eq.x", headers=SDK).json
    assert far["message"] == "Could not find the function public.nope(a) in the schema cache"
    assert far["hint"] is None
    assert rest.anon.post("/rest/v1/rpc/nope").json["code"] == 404  # a plain client: the status


def test_the_execute_rule_holds(rest):
    assert_rest_error(rest.anon.post("/rest/v1/rpc/whoami"), 401)
    assert_rest_error(rest.anon.post("/rest/v1/rpc/secret"), 401)
    token = rest.anon.sign_up()["access_token"]
    assert_rest_error(rest.anon.post("/rest/v1/rpc/secret", token=token), 403)
    assert rest.service.post("/rest/v1/rpc/secret").json == [{"one": 1}]


def test_a_function_without_writes_cannot_change_data(rest):
    response = rest.anon.post("/rest/v1/rpc/sneaky", json={"id": 1})
    body = assert_rest_error(response, 405)
    assert "writes = true" in body["hint"]
    assert rest.anon.get("/rest/v1/items?id=eq.1").json != []
    # The connection it ran on is writable again for the next request.
    assert rest.service.patch("/rest/v1/items?id=eq.1", json={"qty": 11}).status_code == 204


def test_a_function_that_writes_is_post_only_and_commits(rest):
    got = rest.service.get("/rest/v1/rpc/restock?qty=1&name=Apple")
    assert_rest_error(got, 405)
    assert got.headers["Allow"] == "POST"
    assert rest.service.post("/rest/v1/rpc/restock", json={"qty": 42, "name": "Apple"}).status_code == 204
    assert rest.anon.get("/rest/v1/items?name=eq.Apple&select=qty").json == [{"qty": 42}]


def test_a_function_that_writes_is_rolled_back_with_prefer_tx_rollback(make_rest, tables_toml, tmp_path):
    config = tmp_path / "with-functions.toml"
    config.write_text(tables_toml + FUNCTIONS)
    rest = make_rest(TABLES_CONFIG=str(config), DB_TX_END="commit-allow-override")
    headers = {"Prefer": "tx=rollback"}
    done = rest.service.post("/rest/v1/rpc/restock", json={"qty": 42, "name": "Apple"}, headers=headers)
    assert done.status_code == 204 and done.headers["Preference-Applied"] == "tx=rollback"
    assert rest.anon.get("/rest/v1/items?name=eq.Apple&select=qty").json != [{"qty": 42}]
    assert rest.service.post("/rest/v1/rpc/restock", json={"qty": 42, "name": "Apple"}).status_code == 204
    assert rest.anon.get("/rest/v1/items?name=eq.Apple&select=qty").json == [{"qty": 42}]


def test_max_affected_on_a_function(rest):
    """PostgREST's Prefer: handling=strict, max-affected=N on a function: more rows than N is a 400
    PGRST124 and nothing it changed is kept; a function of one row or a scalar is PGRST128."""
    strict = {"Prefer": "handling=strict, max-affected=2", "X-Client-Info": "supabase-js/2"}
    over = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=100", headers=strict)
    assert over.status_code == 400 and over.json["code"] == "PGRST124"
    assert over.json["details"] == "The query affects 4 rows"
    fits = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=3", headers=strict)
    assert fits.status_code == 200 and len(fits.json) == 2
    assert fits.headers["Preference-Applied"] == "handling=strict, max-affected=2"
    scalar = rest.anon.post("/rest/v1/rpc/item_count", headers=strict)
    assert scalar.status_code == 400 and scalar.json["code"] == "PGRST128"
    zero = {"Prefer": "handling=strict, max-affected=0"}
    refused = rest.service.post("/rest/v1/rpc/restock", json={"qty": 42, "name": "Apple"}, headers=zero)
    assert refused.status_code == 400 and refused.json["details"] == "The query affects 1 rows"
    assert rest.anon.get("/rest/v1/items?name=eq.Apple&select=qty").json == [{"qty": 10}]
    lenient = {"Prefer": "max-affected=0"}  # binds only with handling=strict
    assert (
        rest.service.post(
            "/rest/v1/rpc/restock", json={"qty": 42, "name": "Apple"}, headers=lenient
        ).status_code
        == 204
    )


def test_the_openapi_document_lists_the_functions_a_caller_may_run(rest):
    from openapi_spec_validator import validate

    document = rest.anon.get("/rest/v1/").json
    validate(document)
    paths = document["paths"]
    assert "/rest/v1/rpc/cheaper_than" in paths and "/rest/v1/rpc/secret" not in paths
    assert "get" not in paths.get("/rest/v1/rpc/restock", {})


def test_postgrest_py_calls_a_function_over_http(rest, anon_key):
    from postgrest import SyncPostgrestClient

    base, stop = serve_app(rest.app)
    client = SyncPostgrestClient(f"{base}/rest/v1", headers={"apikey": anon_key})
    try:
        found = client.rpc("cheaper_than", {"max_price": 3}).execute()
        assert [row["name"] for row in found.data] == ["Apple", "Date"]
        ordered = client.rpc("cheaper_than", {"max_price": 100}).order("price", desc=True).limit(1).execute()
        assert ordered.data[0]["name"] == "cherry_tart"
        assert client.rpc("item_count", {}).execute().data == 5
    finally:
        client.session.close()
        stop()


def test_json_objects_and_arrays_are_bound_as_json_text(rest):
    body = {"ids": [10, 20, 30], "o": {"add": 5}}
    assert rest.anon.post("/rest/v1/rpc/second_of", json=body).json == 25


@pytest.mark.parametrize(
    ("name", "body"),
    [("cheapest", b'{"max_price": 1e999}'),
     ("cheapest", b'{"max_price": -1E400}'),
     ("second_of", b'{"ids": [10, 1e999], "o": {"add": 5}}'),
     ("second_of", b'{"ids": [1], "o": {"add": -1e999}}')],
)  # fmt: skip
def test_a_number_too_large_for_a_double_is_a_400_not_infinity(rest, name, body):
    """Bound as a float it was infinity (a 503 on MariaDB); inside a JSON argument it was the text
    `Infinity`, which no database's JSON functions read."""
    response = rest.anon.post(f"/rest/v1/rpc/{name}", data=body, headers={"Content-Type": "application/json"})
    assert_rest_error(response, 400)


def test_an_argument_left_out_takes_its_default(rest):
    assert [row["id"] for row in rest.anon.get("/rest/v1/rpc/cheapest").json] == [1, 5]
    assert [row["id"] for row in rest.anon.get("/rest/v1/rpc/cheapest?max_price=3").json] == [1, 5]
    assert [row["id"] for row in rest.anon.post("/rest/v1/rpc/cheapest", json={"max_price": 1.6}).json] == [1]


def test_a_function_with_no_result_answers_204(rest):
    response = rest.service.post("/rest/v1/rpc/restock", json={"qty": 9, "name": "Apple"})
    assert response.status_code == 204 and response.get_data() == b""
    assert [row["qty"] for row in rest.rows("items") if row["name"] == "Apple"] == [9]


def test_head_and_count_on_a_function(rest):
    head = rest.anon.head("/rest/v1/rpc/cheaper_than?max_price=3", headers={"Prefer": "count=exact"})
    assert head.status_code == 200 and head.get_data() == b""
    assert head.headers["Content-Range"] == "0-1/2"
    counted = rest.anon.get(
        "/rest/v1/rpc/cheaper_than?max_price=3&limit=1", headers={"Prefer": "count=exact"}
    )
    assert counted.status_code == 206 and counted.headers["Content-Range"] == "0-0/2"


def test_a_filter_on_the_rows_is_no_argument(rest):
    assert rest.anon.get("/rest/v1/rpc/item_count?colour=red").status_code == 400
    filtered = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=4&name=like.*pp*&select=id")
    assert filtered.json == [{"id": 1}, {"id": 2}]


def test_a_rows_result_takes_casts_new_operators_and_aggregates(make_rest, tables_toml, tmp_path):
    config = tmp_path / "with-functions.toml"
    config.write_text(tables_toml + FUNCTIONS)
    rest = make_rest(TABLES_CONFIG=str(config), DB_AGGREGATES_ENABLED=True)
    response = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=100&select=id::text,name&name=match.^[AD]")
    assert response.status_code == 200, response.json
    assert response.json == [{"id": "1", "name": "Apple"}, {"id": "5", "name": "Date"}]
    unordered = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=3&select=n:name,price::int")
    assert unordered.json == [{"n": "Apple", "price": 2}, {"n": "Date", "price": 2}]
    summed = rest.anon.get("/rest/v1/rpc/cheaper_than?max_price=100&select=price.sum()")
    assert summed.json == [{"sum": 13.75}]  # PostgREST aggregates a function's rows as a table's
    grouped = rest.anon.get(
        "/rest/v1/rpc/cheaper_than?max_price=100&select=price,n:count()&price=lt.3&order=price.desc",
        headers={"Prefer": "count=exact"},
    )
    assert grouped.json == [{"price": 2.0, "n": 1}, {"price": 1.5, "n": 1}]
    assert grouped.headers["Content-Range"] == "0-1/2"
    scalar = rest.anon.post("/rest/v1/rpc/item_count", headers={"Prefer": "count=exact"})
    assert scalar.json == 5 and scalar.headers["Content-Range"] == "0-0/1"  # PostgREST's one result
    assert rest.anon.post("/rest/v1/rpc/item_count").headers["Content-Range"] == "0-0/*"


TRACE_HEADERS = {
    "sqlite": "json_extract(:request_headers, '$.{}')",
    "mysql": "JSON_UNQUOTE(JSON_EXTRACT(:request_headers, '$.{}'))",
}


def trace_function(backend):
    """supabase-js's get_req_trace_headers, written in tables.toml for `backend`."""
    extract = TRACE_HEADERS[backend]
    columns = ", ".join(
        f"{extract.format(name)} AS {name}" for name in ("traceparent", "tracestate", "baggage")
    )
    return (
        f'\n[functions.get_req_trace_headers]\nsql = "SELECT {columns}"\nexecute = "anon"\nreturns = "one"\n'
    )


def test_a_function_reads_the_requests_headers(make_rest, tables_toml, tmp_path, backend):
    """:request_headers is the request's headers as a JSON object, names in lower case (PostgREST's
    current_setting('request.headers')): supabase-js's trace propagation test reads traceparent
    back through such a function."""
    config = tmp_path / "with-headers.toml"
    config.write_text(tables_toml + FUNCTIONS + trace_function(backend))
    rest = make_rest(TABLES_CONFIG=str(config))
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    sent = {"traceparent": traceparent, "TraceState": "sb=v:1", **SDK}
    for call in (rest.anon.post, rest.anon.get):
        response = call("/rest/v1/rpc/get_req_trace_headers", headers=sent)
        assert response.status_code == 200, response.json
        assert response.json == {"traceparent": traceparent, "tracestate": "sb=v:1", "baggage": None}


def test_request_headers_cannot_be_given_as_an_argument(make_rest, tables_toml, tmp_path, backend):
    config = tmp_path / "with-headers.toml"
    config.write_text(tables_toml + FUNCTIONS + trace_function(backend))
    rest = make_rest(TABLES_CONFIG=str(config))
    forged = '{"traceparent": "forged"}'
    for response in (
        rest.anon.post("/rest/v1/rpc/get_req_trace_headers", json={"request_headers": forged}, headers=SDK),
        rest.anon.get(f"/rest/v1/rpc/get_req_trace_headers?request_headers={forged}", headers=SDK),
    ):
        assert response.status_code == 400 and response.json["code"] == "PGRST202", response.json
