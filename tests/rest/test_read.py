"""GET/HEAD /rest/v1/{table}: select, both filter dialects, order, paging, counts, media types."""

import csv
import io

import pytest

from support import assert_rest_error

# (query-string pairs, expected ids): each operator in the seed's dotted dialect and PostgREST's.
FILTERS = [
    ([("id", "eq.2")], [2]),
    ([("id.eq", "2")], [2]),
    ([("name", "neq.Apple")], [2, 3, 4, 5]),
    ([("name.neq", "Apple")], [2, 3, 4, 5]),
    ([("price", "gt.2")], [2, 4]),
    ([("price.gt", "2")], [2, 4]),
    ([("price", "gte.2")], [2, 4, 5]),
    ([("price.gte", "2")], [2, 4, 5]),
    ([("price", "lt.2")], [1]),
    ([("price.lt", "2")], [1]),
    ([("price", "lte.2")], [1, 5]),
    ([("price.lte", "2")], [1, 5]),
    ([("name", "like.*pie")], [2]),
    ([("name.like", "%pie")], [2]),
    ([("name", "like.apple*")], [2]),
    ([("name.like", "a%")], [2]),
    ([("name", "ilike.apple*")], [1, 2]),
    ([("name.ilike", "APPLE%")], [1, 2]),
    ([("code", "like.A_")], [1, 2]),
    ([("name", "like.cherry\\_*")], [4]),
    ([("note", "like.*\\%*")], [4]),
    ([("name", "in.(Apple,Date)")], [1, 5]),
    ([("name.in", "[Apple,Date]")], [1, 5]),
    ([("note", 'in.("yellow, ripe",red)')], [1, 3]),
    ([("note.in", '["yellow, ripe","red"]')], [1, 3]),
    ([("id", "in.()")], []),
    ([("note", "is.null")], [2]),
    ([("note.is", "null")], [2]),
    ([("active", "is.true")], [1, 3]),
    ([("active", "is.false")], [2, 5]),
    ([("active.is", "false")], [2, 5]),
    ([("active", "eq.true")], [1, 3]),
    ([("qty", "not.eq.0")], [1, 3, 5]),
    ([("qty.not.eq", "0")], [1, 3, 5]),
    ([("note", "not.is.null")], [1, 3, 4, 5]),
    ([("name", "not.in.(Apple,Banana)")], [2, 4, 5]),
    ([("created", "gt.2024-01-15T00:00:00")], [2, 5]),
    ([("created", "lt.2024-01-01")], [4]),
    ([("created.gte", "2024-02-01T12:30:00Z")], [2, 5]),
    ([("note", 'eq.it\'s "sweet"')], [5]),
    ([("id", "gt.1"), ("id", "lt.4")], [2, 3]),
    ([("or", "(id.eq.1,price.gt.5)")], [1, 4]),
    ([("and", "(price.gt.1,or(active.is.true,qty.is.null))")], [1, 4]),
    ([("or", "(and(id.gt.3,price.gt.5),name.eq.Banana)")], [3, 4]),
    ([("or", '(note.eq."yellow, ripe",id.in.(1,2))')], [1, 2, 3]),
    ([("not.or", "(id.eq.1,id.eq.2)")], [3, 4, 5]),
    ([("not.and", "(price.gt.1,qty.gt.0)")], [2]),
    ([("or", "(id.not.eq.1,id.eq.1)"), ("id", "lte.2")], [1, 2]),
    ([("name.ilike", "a*"), ("price", "gt.2")], [2]),
    ([("id.gte", "2"), ("or", "(name.eq.Banana,qty.eq.3)"), ("qty", "not.is.null")], [3, 5]),
]


@pytest.mark.parametrize(("pairs", "expected"), FILTERS)
def test_filters_in_both_dialects(rest_reads, pairs, expected):
    assert rest_reads.ids(rest_reads.anon.get("/rest/v1/items", query_string=pairs)) == expected


def test_every_row_every_column_by_default(rest):
    response = rest.anon.get("/rest/v1/items")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert response.headers["Content-Range"] == "0-4/*"
    first = response.json[0]
    assert first == {
        "id": 1,
        "name": "Apple",
        "price": 1.5,
        "qty": 10,
        "active": True,
        "created": "2024-01-01T10:00:00",
        "code": "A1",
        "note": "red",
    }
    assert response.json[2]["price"] is None and response.json[3]["active"] is None


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("id,name", {"id": 1, "name": "Apple"}),
        ("name,id", {"name": "Apple", "id": 1}),
        ("label:name,id", {"label": "Apple", "id": 1}),
        ("*", None),
        ("id, price ,active", {"id": 1, "price": 1.5, "active": True}),
        ("first:id,second:id", {"first": 1, "second": 1}),
    ],
)
def test_select_and_aliases(rest, select, expected):
    response = rest.anon.get("/rest/v1/items", query_string={"select": select, "id": "eq.1"})
    assert response.status_code == 200
    row = response.json[0]
    if expected is None:
        assert len(row) == len(rest.table("items").c)
    else:
        assert row == expected and list(row) == list(expected)


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("price.asc", [1, 5, 2, 4, 3]),
        ("price", [1, 5, 2, 4, 3]),
        ("price.desc", [3, 4, 2, 5, 1]),
        ("price.asc.nullsfirst", [3, 1, 5, 2, 4]),
        ("price.desc.nullslast", [4, 2, 5, 1, 3]),
        ("price.nullsfirst", [3, 1, 5, 2, 4]),
        ("active.desc,id.asc", [4, 1, 3, 2, 5]),
        ("active.asc,id.desc", [5, 2, 3, 1, 4]),
        ("qty.desc", [4, 1, 3, 5, 2]),
    ],
)
def test_order_sorts_nulls_as_postgresql(rest_reads, order, expected):
    assert rest_reads.ids(rest_reads.anon.get(f"/rest/v1/items?order={order}")) == expected


def postgresql_order(rows, column, descending, nulls_first):
    """`rows` as PostgreSQL orders them by `column`, then by id."""
    values = sorted((row for row in rows if row[column] is not None), key=lambda row: row["id"])
    values.sort(key=lambda row: row[column], reverse=descending)  # stable: equal values by id
    nulls = sorted((row for row in rows if row[column] is None), key=lambda row: row["id"])
    return nulls + values if nulls_first else values + nulls


ORDERS = {  # order= -> (descending, nulls first)
    "price": (False, False),
    "price.asc.nullsfirst": (False, True),
    "price.nullslast": (False, False),
    "price.desc": (True, True),
    "price.desc.nullslast": (True, False),
    "price.desc.nullsfirst": (True, True),
}
FILTERS = {  # a filter -> which rows it keeps
    "": lambda row: True,
    "price=gte.2": lambda row: row["price"] is not None and row["price"] >= 2,
    "price=not.eq.2": lambda row: row["price"] is not None and row["price"] != 2,
    "or=(price.is.null,qty.gt.3)": lambda row: row["price"] is None or (row["qty"] or 0) > 3,
    "price=is.null": lambda row: row["price"] is None,
    "qty=gt.0": lambda row: row["qty"] is not None and row["qty"] > 0,
}
PAGES = [(0, 2), (0, 3), (2, 3), (3, 4), (5, 10), (0, 100), (8, 2), (1, None)]


def test_pages_of_an_order_place_nulls_as_postgresql(rest):
    """Every page of every NULL placement, under filters that keep NULLs, drop them or keep only
    them, across the pages where NULLs and values meet (on MySQL a limited page reads the NULLs
    and the values apart)."""
    extra = [
        {"name": "n1", "price": None, "qty": 4},
        {"name": "n2", "price": 2.0, "qty": None},
        {"name": "n3", "price": None, "qty": 1},
        {"name": "n4", "price": 7.0, "qty": 8},
    ]
    assert rest.service.post("/rest/v1/items", json=extra).status_code == 201
    everything = rest.anon.get("/rest/v1/items?select=id,price,qty").json
    for order, (descending, nulls_first) in ORDERS.items():
        for condition, keeps in FILTERS.items():
            kept = [row for row in everything if keeps(row)]
            ordered = postgresql_order(kept, "price", descending, nulls_first)
            expected = [row["id"] for row in ordered]
            for offset, limit in PAGES:
                query = f"/rest/v1/items?select=id&order={order}&offset={offset}&{condition}"
                query += "" if limit is None else f"&limit={limit}"
                page = expected[offset:] if limit is None else expected[offset : offset + limit]
                assert rest.ids(rest.anon.get(query)) == page, query
    counted = [row for row in everything if row["price"] is not None]
    for offset in (0, len(counted) - 1):  # a page of values alone, then one that reaches the NULLs
        query = f"/rest/v1/items?select=id&order=price&offset={offset}&limit=2"
        response = rest.anon.get(query, headers={"Prefer": "count=exact"})
        expected = [row["id"] for row in postgresql_order(everything, "price", False, False)]
        assert rest.ids(response) == expected[offset : offset + 2], query
        assert response.headers["Content-Range"] == f"{offset}-{offset + 1}/{len(everything)}", query


def test_a_table_without_a_primary_key_pages_with_no_order_at_all(rest):
    rest.service.post("/rest/v1/events", json=[{"kind": "a", "amount": None}, {"kind": "b", "amount": 1}])
    assert rest.anon.get("/rest/v1/events?select=kind&limit=1").json in ([{"kind": "a"}], [{"kind": "b"}])
    response = rest.anon.get("/rest/v1/events?select=kind&order=amount&limit=1&offset=1")
    assert response.json == [{"kind": "a"}]  # NULLs last, the page in two parts on MySQL


def test_default_order_is_the_primary_key(rest):
    rest.service.post("/rest/v1/pairs", json=[{"a": 2, "b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 1}])
    rows = rest.anon.get("/rest/v1/pairs").json
    assert [(row["a"], row["b"]) for row in rows] == [(1, 1), (1, 2), (2, 1)]
    rest.anon.patch("/rest/v1/items?id=eq.1", json={"name": "zzz"})
    assert rest.ids(rest.anon.get("/rest/v1/items")) == [1, 2, 3, 4, 5]


def test_equal_sort_keys_page_stably_by_primary_key(rest):
    rest.anon.patch("/rest/v1/items?id=gte.0", json={"qty": 1})
    pages = [rest.ids(rest.anon.get(f"/rest/v1/items?order=qty&limit=2&offset={o}")) for o in (0, 2, 4)]
    assert pages == [[1, 2], [3, 4], [5]]


@pytest.mark.parametrize(
    ("query", "headers", "expected", "content_range"),
    [
        ("limit=2", {}, [1, 2], "0-1/*"),
        ("limit=2&offset=2", {}, [3, 4], "2-3/*"),
        ("offset=3", {}, [4, 5], "3-4/*"),
        ("limit=0", {}, [], "*/*"),
        ("limit=100", {}, [1, 2, 3, 4, 5], "0-4/*"),
        ("offset=10", {}, [], "*/*"),
        ("", {"Range": "1-2"}, [2, 3], "1-2/*"),
        ("", {"Range": "3-"}, [4, 5], "3-4/*"),
        ("", {"Range": "0-1", "Range-Unit": "items"}, [1, 2], "0-1/*"),
        ("", {"Range": "items=2-2"}, [3], "2-2/*"),
        ("limit=2", {"Range": "0-3"}, [1, 2], "0-1/*"),
        ("limit=10&offset=1", {"Range": "0-2"}, [2, 3], "1-2/*"),
        ("order=id.desc&limit=2", {}, [5, 4], "0-1/*"),
    ],
)
def test_limit_offset_and_range(rest_reads, query, headers, expected, content_range):
    response = rest_reads.anon.get(f"/rest/v1/items?{query}", headers=headers)
    assert rest_reads.ids(response) == expected
    assert response.status_code == 200 and response.headers["Content-Range"] == content_range


@pytest.mark.parametrize(
    ("query", "headers", "names"),
    [
        ("limit=-1", {}, "limit"),
        ("limit=abc", {}, "limit"),
        ("limit=1.5", {}, "limit"),
        ("limit=", {}, "limit"),
        ("offset=-3", {}, "offset"),
        ("offset=1e3", {}, "offset"),
        ("limit=99999999999999999999999", {}, "limit"),
        ("", {"Range": "a-b"}, "Range"),
        ("", {"Range": "5-2"}, "Range"),
        ("", {"Range": "-5"}, "Range"),
        ("", {"Range": "0-1,3-4"}, "Range"),
        ("", {"Range": "0-9", "Range-Unit": "bytes"}, "Range"),
    ],
)
def test_bad_paging_is_a_400_naming_the_part(rest_reads, query, headers, names):
    body = assert_rest_error(rest_reads.anon.get(f"/rest/v1/items?{query}", headers=headers), 400)
    assert names in body["message"]


def test_never_more_than_max_rows(make_rest):
    rest = make_rest(MAX_ROWS=2)
    assert rest.ids(rest.anon.get("/rest/v1/items")) == [1, 2]
    assert rest.ids(rest.anon.get("/rest/v1/items?limit=100&offset=1")) == [2, 3]
    response = rest.anon.get("/rest/v1/items", headers={"Range": "0-99", "Prefer": "count=exact"})
    assert rest.ids(response) == [1, 2]
    assert response.status_code == 206 and response.headers["Content-Range"] == "0-1/5"


@pytest.mark.parametrize(
    ("query", "status", "content_range", "expected"),
    [
        ("", 200, "0-4/5", [1, 2, 3, 4, 5]),
        ("limit=2", 206, "0-1/5", [1, 2]),
        ("limit=2&offset=3", 206, "3-4/5", [4, 5]),
        ("offset=4", 206, "4-4/5", [5]),
        ("offset=5", 206, "*/5", []),
        ("limit=0", 206, "*/5", []),
        ("name=eq.none", 200, "*/0", []),
        ("name=ilike.a*", 200, "0-1/2", [1, 2]),
        ("name=ilike.a*&limit=1", 206, "0-0/2", [1]),
    ],
)
def test_exact_count_content_range_and_status(rest_reads, query, status, content_range, expected):
    response = rest_reads.anon.get(f"/rest/v1/items?{query}", headers={"Prefer": "count=exact"})
    assert response.status_code == status and rest_reads.ids(response) == expected
    assert response.headers["Content-Range"] == content_range


def test_offset_past_the_total_is_a_416(rest):
    response = rest.anon.get("/rest/v1/items?offset=6", headers={"Prefer": "count=exact"})
    body = assert_rest_error(response, 416)
    assert body["details"] == "An offset of 6 was requested, but there are only 5 rows."
    assert response.headers["Content-Range"] == "*/5"
    assert rest.anon.get("/rest/v1/items?offset=6").status_code == 200


def test_count_with_range_header_and_empty_table(rest):
    response = rest.anon.get("/rest/v1/items", headers={"Prefer": "count=exact", "Range": "0-2"})
    assert response.status_code == 206 and response.headers["Content-Range"] == "0-2/5"
    empty = rest.anon.get("/rest/v1/children", headers={"Prefer": "count=exact"})
    assert empty.status_code == 200 and empty.json == [] and empty.headers["Content-Range"] == "*/0"
    assert rest.anon.get("/rest/v1/children").headers["Content-Range"] == "*/*"


def test_head_has_the_headers_and_no_body(rest):
    response = rest.anon.head("/rest/v1/items?limit=2", headers={"Prefer": "count=exact"})
    assert response.status_code == 206 and response.get_data() == b""
    assert response.headers["Content-Range"] == "0-1/5"
    full = rest.anon.head("/rest/v1/items", headers={"Prefer": "count=exact"})
    assert full.status_code == 200 and full.headers["Content-Range"] == "0-4/5"


def test_single_object(rest):
    accept = {"Accept": "application/vnd.pgrst.object+json"}
    response = rest.anon.get("/rest/v1/items?id=eq.2&select=id,name", headers=accept)
    assert response.status_code == 200 and response.json == {"id": 2, "name": "apple pie"}
    assert response.mimetype == "application/vnd.pgrst.object+json"
    several = assert_rest_error(rest.anon.get("/rest/v1/items?name=ilike.a*", headers=accept), 406)
    assert several["details"] == "The result contains 2 rows"
    none = assert_rest_error(rest.anon.get("/rest/v1/items?id=eq.99", headers=accept), 406)
    assert none["details"] == "The result contains 0 rows"
    limited = rest.anon.get("/rest/v1/items?name=ilike.a*&limit=1", headers=accept)
    assert limited.status_code == 200 and limited.json["id"] == 1


def test_csv(rest):
    response = rest.anon.get(
        "/rest/v1/items?select=id,name,price,note,active&order=id", headers={"Accept": "text/csv"}
    )
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(response.get_data(as_text=True))))
    assert rows[0] == ["id", "name", "price", "note", "active"]
    assert rows[1][:2] == ["1", "Apple"] and float(rows[1][2]) == 1.5
    assert rows[2][3] == "" and rows[3][2] == "" and rows[3][3] == "yellow, ripe"
    assert rows[5][3] == 'it\'s "sweet"' and rows[1][4] == "t" and rows[4][4] == ""
    # quoted as PostgreSQL quotes a row's fields: a comma, a space, a quote
    text = response.get_data(as_text=True).splitlines()
    assert text[3].endswith(',"yellow, ripe",t') and text[5].endswith(',"it\'s ""sweet""",f')
    assert not response.get_data(as_text=True).endswith("\n")  # PostgREST ends on the last row
    empty = rest.anon.get("/rest/v1/items?id=eq.99&select=id,name", headers={"Accept": "text/csv"})
    assert empty.get_data(as_text=True) == "id,name"


@pytest.mark.parametrize(
    ("accept", "media"),
    [
        ("application/json", "application/json"),
        ("*/*", "application/json"),
        ("application/json, text/plain, */*", "application/json"),
        ("text/csv;q=1, application/json;q=0.5", "text/csv"),
    ],
)
def test_accept_negotiation(rest, accept, media):
    assert rest.anon.get("/rest/v1/items", headers={"Accept": accept}).mimetype == media


def test_unsupported_accept_is_a_406(rest):
    assert_rest_error(rest.anon.get("/rest/v1/items", headers={"Accept": "application/xml"}), 406)


def test_reserved_parameters_are_not_filters(rest):
    response = rest.anon.get(f"/rest/v1/items?apikey={rest.anon.key}&columns=id&on_conflict=id&select=id")
    assert rest.ids(response) == [1, 2, 3, 4, 5]


def test_csv_cells_a_spreadsheet_would_run_are_quoted(rest):
    """Text starting with = + - @ (or a tab) reaches a spreadsheet as text, not as a formula;
    numbers, negative ones included, stay numbers."""
    notes = ['=HYPERLINK("http://evil.example")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "plain"]
    for n, note in enumerate(notes):
        created = rest.service.post("/rest/v1/items", json={"name": f"csv{n}", "note": note, "price": -5})
        assert created.status_code == 201
    response = rest.anon.get(
        "/rest/v1/items?select=note,price&name=like.csv*&order=name", headers={"Accept": "text/csv"}
    )
    rows = list(csv.reader(io.StringIO(response.get_data(as_text=True))))[1:]
    assert [row[0] for row in rows] == ["'" + note for note in notes[:-1]] + ["plain"]
    assert {float(row[1]) for row in rows} == {-5.0} and not rows[0][1].startswith("'")


@pytest.mark.parametrize(
    "accept",
    ["application/vnd.pgrst.array+json;nulls=stripped", "application/vnd.pgrst.array;nulls=stripped"],
)
def test_nulls_stripped_leaves_out_null_values(rest, accept):
    """PostgREST's `Accept: application/vnd.pgrst.array+json;nulls=stripped` (json_strip_nulls): a
    key whose value is null is left out, explicitly selected or not, in embeds too."""
    query = {"select": "id,price,code,children(id,label)", "id": "in.(2,3)", "order": "id"}
    response = rest.anon.get("/rest/v1/items", query_string=query, headers={"Accept": accept})
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/vnd.pgrst.array+json;nulls=stripped"
    assert response.json == [
        {"id": 2, "price": 3.25, "code": "A2", "children": []},
        {"id": 3, "children": []},
    ]
    single = rest.anon.get(
        "/rest/v1/items?select=id,code,note&id=eq.3",
        headers={"Accept": "application/vnd.pgrst.object+json;nulls=stripped"},
    )
    assert single.headers["Content-Type"] == "application/vnd.pgrst.object+json;nulls=stripped"
    assert single.json == {"id": 3, "note": "yellow, ripe"}
    many = rest.anon.get(
        "/rest/v1/items?select=id", headers={"Accept": "application/vnd.pgrst.object+json;nulls=stripped"}
    )
    assert many.status_code == 406 and many.json["details"] == "The result contains 5 rows"
    written = rest.anon.post(
        "/rest/v1/items?select=id,name,price",
        json={"name": "Kiwi"},
        headers={"Accept": accept, "Prefer": "return=representation"},
    )
    assert written.status_code == 201 and written.json == [{"id": 6, "name": "Kiwi"}]
    plain = rest.anon.get(
        "/rest/v1/items?select=price&id=eq.3", headers={"Accept": "application/vnd.pgrst.array+json"}
    )
    assert plain.json == [{"price": None}]
    assert plain.headers["Content-Type"] == "application/vnd.pgrst.array+json"
