"""Prepared read plans: one per request shape, run with each request's own values. A wrong cached
plan would show another request's values, another owner's rows, or a table as it was."""

import functools
from decimal import Decimal

import sqlalchemy as sa

from blueprints import rest_request
from database import statements
from extensions import db, state
from rest import plans, reflection
from support import Api


def names(response):
    assert response.status_code in (200, 206), response.get_data(as_text=True)
    return [row["name"] if "name" in row else row["body"] for row in response.json]


def test_one_shape_runs_with_each_requests_values(rest):
    get = rest.anon.get
    assert names(get("/rest/v1/items?select=name&id=eq.1")) == ["Apple"]
    assert names(get("/rest/v1/items?select=name&id=eq.2")) == ["apple pie"]
    assert names(get("/rest/v1/items?select=name&id=in.(1,3)")) == ["Apple", "Banana"]
    assert names(get("/rest/v1/items?select=name&id=in.(4)")) == ["cherry_tart"]
    assert names(get("/rest/v1/items?select=name&id=in.()")) == []
    assert names(get("/rest/v1/items?select=name&name=like.*pp*&limit=1")) == ["Apple"]
    assert names(get("/rest/v1/items?select=name&name=like.*an*&limit=1&offset=0")) == ["Banana"]
    assert names(get("/rest/v1/items?select=name&active=is.true")) == ["Apple", "Banana"]
    assert names(get("/rest/v1/items?select=name&active=is.null")) == ["cherry_tart"]
    assert names(get("/rest/v1/items?select=name&or=(id.eq.1,id.eq.5)&offset=1")) == ["Date"]
    assert names(get("/rest/v1/items?select=name&or=(id.eq.2,id.eq.3)&offset=1")) == ["Banana"]


def test_one_shape_for_two_owners_and_for_the_service_key(rest, anon_key):
    ann = rest.anon.sign_up("ann@example.com")["access_token"]
    bob = rest.anon.sign_up("bob@example.com")["access_token"]
    notes = [(1, "ann one"), (2, "bob one"), (1, "ann two")]
    rest.execute(sa.insert(rest.table("notes")).values([{"user_id": u, "body": b} for u, b in notes]))
    query = "/rest/v1/notes?select=body&body=like.*o*&order=id&limit=10"
    headers = {"Prefer": "count=exact"}
    for _ in range(2):  # the second round runs on the plans the first one made
        response = rest.anon.get(query, token=ann, headers=headers)
        assert names(response) == ["ann one", "ann two"] and response.headers["Content-Range"] == "0-1/2"
        response = rest.anon.get(query, token=bob, headers=headers)
        assert names(response) == ["bob one"] and response.headers["Content-Range"] == "0-0/1"
        response = rest.service.get(query, headers=headers)
        assert names(response) == ["ann one", "bob one", "ann two"]
        assert rest.anon.get(query).status_code == 401
    assert Api(rest.app, anon_key).get(query, token=ann).json == [{"body": "ann one"}, {"body": "ann two"}]


def test_a_table_reflected_again_gets_new_plans(rest, monkeypatch):
    query = "/rest/v1/items?id=eq.1"
    assert "colour" not in rest.anon.get(query).json[0]
    rest.execute(sa.text("ALTER TABLE items ADD COLUMN colour VARCHAR(20)"))
    monkeypatch.setattr(reflection, "REFRESH_INTERVAL", 0)
    assert rest.anon.get("/rest/v1/items?select=colour&id=eq.1").json == [{"colour": None}]
    assert rest.anon.get(query).json[0]["colour"] is None  # select=* as the table is now


def test_plans_are_bounded(rest, monkeypatch):
    monkeypatch.setattr(plans, "MAX_PLANS", 3)
    for column in ("id", "name", "price", "qty", "code", "note"):
        assert rest.anon.get(f"/rest/v1/items?{column}=is.null").status_code == 200
    with rest.app.app_context():
        kept = state().schema.plans
        assert len(kept) == 3
        assert [key[1][0][0] for key in kept] == ["qty", "code", "note"]  # the most recently used


# --- prepared plans run straight on the DBAPI (database.statements.prepare)


def sqlalchemy_statements(app, request):
    """The SELECTs SQLAlchemy executed for `request()`: the prepared path executes none."""
    seen = []
    with app.app_context():
        engine = db.engine

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        response = request()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return response, [s for s in seen if s.lstrip().upper().startswith("SELECT")]


def test_a_prepared_read_gives_what_sqlalchemy_gives_for_every_type(rest):
    """`id=eq.N` runs prepared; `id=in.(N)` (an expanding list) through SQLAlchemy: every value of
    every column type (dates, doubles, booleans, NULLs, text) comes out the same by both."""
    rest.anon.get("/rest/v1/items?id=eq.1")  # reflected and planned before anything is counted
    counted = {"Prefer": "count=exact"}
    for row in range(1, len(rest.seeded) + 1):
        prepared, executed = sqlalchemy_statements(
            rest.app, functools.partial(rest.anon.get, f"/rest/v1/items?id=eq.{row}", headers=counted)
        )
        assert executed == []
        through_sqlalchemy, executed = sqlalchemy_statements(
            rest.app, functools.partial(rest.anon.get, f"/rest/v1/items?id=in.({row})", headers=counted)
        )
        assert len(executed) == 2  # the page and its count
        assert prepared.status_code == through_sqlalchemy.status_code == 200
        assert prepared.json == through_sqlalchemy.json and len(prepared.json) == 1
        assert prepared.headers["Content-Range"] == through_sqlalchemy.headers["Content-Range"] == "0-0/1"
    assert rest.anon.get("/rest/v1/items?id=eq.4").json[0]["active"] is None
    assert rest.anon.get("/rest/v1/items?id=eq.1").json[0]["created"] == "2024-01-01T10:00:00"


def test_a_prepared_read_binds_values_it_converts(rest):
    """Values go through the column type's bind processor: a datetime compared as the database
    stores it, a boolean as the database's boolean."""
    assert names(rest.anon.get("/rest/v1/items?select=name&created=gt.2024-01-15T00:00:00&order=id")) == [
        "apple pie",
        "Date",
    ]
    assert names(rest.anon.get("/rest/v1/items?select=name&active=eq.false&order=id")) == [
        "apple pie",
        "Date",
    ]


def test_a_column_dropped_under_a_prepared_plan_is_reflected_again(rest):
    """The plan names a column the table no longer has: the database's error comes back as
    SQLAlchemy's, the table is reflected again and the read answered by a new plan."""
    rest.execute(sa.text("ALTER TABLE items ADD COLUMN colour VARCHAR(20)"))
    assert "colour" in rest.anon.get("/rest/v1/items?id=eq.1").json[0]
    rest.execute(sa.text("ALTER TABLE items DROP COLUMN colour"))
    response = rest.anon.get("/rest/v1/items?id=eq.1")
    assert response.status_code == 200 and "colour" not in response.json[0]


def test_the_bearers_session_lookup_is_prepared(rest):
    token = rest.anon.sign_up("prepared@example.com")["access_token"]
    rest.anon.get("/auth/v1/user", token=token)
    response, executed = sqlalchemy_statements(
        rest.app, functools.partial(rest.anon.get, "/auth/v1/user", token=token)
    )
    assert response.status_code == 200 and response.json["email"] == "prepared@example.com"
    assert executed == []


def last_plan_sql(rest, query, monkeypatch, index=0):
    """The SQL of the page `query` reads (its prepared plan's; `index`: of its statements, the one
    run in that place), and the database's plan for it."""
    seen = []
    run = statements.run_prepared

    def run_and_record(engine, values, *prepared, **options):
        seen.extend((s.sql, statements.bound_parameters(s, values)) for s in prepared)
        return run(engine, values, *prepared, **options)

    monkeypatch.setattr(statements, "run_prepared", run_and_record)
    assert rest.anon.get(query).status_code == 200
    sql, parameters = seen[index]
    with rest.app.app_context():
        explain = "EXPLAIN QUERY PLAN " if db.engine.dialect.name == "sqlite" else "EXPLAIN "
        with db.engine.connect() as connection:
            found = connection.exec_driver_sql(explain + sql, parameters).all()
    return " ".join(sql.split()), [" | ".join(str(value) for value in row) for row in found]


def test_a_filter_that_drops_nulls_leaves_the_order_column_as_it_is(rest, monkeypatch):
    """price=gte.2 keeps no NULL price: ordering by price needs no NULL placement, so an index on
    the column can give the order."""
    sql, _ = last_plan_sql(rest, "/rest/v1/items?price=gte.2&order=price&limit=2", monkeypatch)
    assert "IS NULL" not in sql and "NULLS" not in sql and "UNION" not in sql
    placed = ("IS NULL", "IS NOT NULL", "NULLS LAST")  # MySQL reads the values apart first
    sql, _ = last_plan_sql(rest, "/rest/v1/items?or=(price.gte.2)&order=price&limit=2", monkeypatch)
    assert any(text in sql for text in placed)  # inside or=: not known to drop NULLs
    sql, _ = last_plan_sql(rest, "/rest/v1/items?price=not.gte.2&order=price&limit=2", monkeypatch)
    assert any(text in sql for text in placed)  # negated: not known to drop NULLs


def test_on_mysql_a_limited_page_reads_nulls_and_values_apart_from_the_index(rest, backend, monkeypatch):
    """MySQL has no NULLS LAST: one SELECT would order by `price IS NULL` first, which no index has,
    and sort every matching row. The page is read as the NULLs and the values, each in the order of
    the index on price, then the few rows kept are sorted; the values come first, and when they
    fill the page they are read alone, one walk of the index."""
    rest.execute(sa.text("CREATE INDEX items_price ON items (price)"))
    rows = [{"name": f"n{n}", "price": None if n % 10 == 0 else n % 97} for n in range(400)]
    rest.execute(sa.insert(rest.table("items")).values(rows))
    query = "/rest/v1/items?select=id,price&qty=is.null&order=price&limit=2"
    sql, plan = last_plan_sql(rest, query, monkeypatch)
    if backend == "sqlite":
        assert "NULLS LAST" in sql and "UNION" not in sql
        return
    assert "UNION" not in sql and "price IS NOT NULL" in sql and "IS NULL ASC" not in sql
    [part] = [line for line in plan if "| items |" in line]
    assert "filesort" not in part and "items_price" in part, plan
    # Past the few values a filter keeps, the page needs the NULLs: it is read in two parts.
    sql, plan = last_plan_sql(rest, query + "&price=not.gt.5&offset=40", monkeypatch, index=1)
    assert "UNION ALL" in sql and "IS NULL ASC" not in sql
    parts = [line for line in plan if "| items |" in line]  # MariaDB sees no NULL is `not.gt.5`
    assert parts and not any("filesort" in line for line in parts), plan
    assert all("items_price" in line for line in parts), plan
    # A second order column whose NULLs move too: no index gives that order, one SELECT sorts.
    sql, _ = last_plan_sql(rest, query.replace("order=price", "order=price,qty.asc"), monkeypatch)
    assert "UNION" not in sql and "items.price IS NULL ASC" in sql


def test_floats_read_with_no_conversion_left_where_the_driver_reads_floats(rest):
    """PyMySQL reads DOUBLE and FLOAT as floats: a Float column (not asdecimal) keeps no result
    processor, which would only call float() again, so rows are not rebuilt one by one; SQLite's
    REAL has none anyway. A DECIMAL still reads as a Decimal."""
    with rest.app.app_context():
        engine = db.engine
        items = sa.Table("items", sa.MetaData(), autoload_with=engine)
        price = sa.type_coerce(items.c.price, sa.Float).label("price")
        query = sa.select(price, sa.cast(items.c.price, sa.Numeric(10, 2)).label("exact"))
        prepared = statements.prepare(query.where(items.c.id == sa.bindparam("id", required=True)), engine)
        found = statements.run_prepared(engine, {"id": 1}, prepared)[0]
    assert found == [(1.5, Decimal("1.50"))] and type(found[0].price) is float
    [processors] = prepared.results.values()
    assert processors[0] is None


# --- a read parsed once per query string and headers (blueprints.rest_request.parse_read), its filters
# walked once per table (plans.walked)

EVERY_ITEM = ["Apple", "apple pie", "Banana", "cherry_tart", "Date"]


def test_a_kept_parse_serves_only_the_request_it_was_made_of(rest):
    """Each input of a read's parse, changed under the same query string, changes the answer: a parse
    kept under a key that left one out would answer with the first request's."""
    query = "/rest/v1/items?select=name&order=id"
    get = rest.anon.get
    assert names(get(query)) == EVERY_ITEM
    assert names(get(query, headers={"Range": "1-2"})) == ["apple pie", "Banana"]
    assert get(query, headers={"Range": "1-2", "Range-Unit": "bytes"}).status_code == 400
    assert get(query, headers={"Prefer": "count=exact"}).headers["Content-Range"] == "0-4/5"
    assert get(query, headers={"Accept": "text/csv"}).get_data(as_text=True).startswith("name\nApple\n")
    rest.app.config["MAX_ROWS"] = 2
    assert names(get(query)) == ["Apple", "apple pie"]
    rest.app.config["MAX_ROWS"] = 1000
    assert names(get(query)) == EVERY_ITEM
    assert get(query).headers["Content-Range"] == "0-4/*"


def test_a_kept_parse_follows_the_settings_it_depends_on(rest):
    counted = "/rest/v1/items?select=count()"
    rest.app.config["DB_AGGREGATES_ENABLED"] = True
    assert rest.anon.get(counted).json == [{"count": 5}]
    rest.app.config["DB_AGGREGATES_ENABLED"] = False
    assert rest.anon.get(counted).status_code == 400
    query, rollback = "/rest/v1/items?select=name&id=eq.1", {"Prefer": "tx=rollback"}
    rest.app.config["DB_TX_END"] = "commit-allow-override"
    assert rest.anon.get(query, headers=rollback).headers["Preference-Applied"] == "tx=rollback"
    rest.app.config["DB_TX_END"] = "commit"
    assert "Preference-Applied" not in rest.anon.get(query, headers=rollback).headers


def test_a_read_that_does_not_parse_is_refused_every_time(rest):
    for _ in range(2):
        assert rest.anon.get("/rest/v1/items?select=name(").status_code == 400
        assert rest.anon.get("/rest/v1/items?id=eq.1", headers={"Accept": "image/png"}).status_code == 406


def test_a_filters_walk_is_of_the_table_as_reflected_now(rest, monkeypatch):
    """The same filter on a column that became text: its value is bound as text now, not as the
    boolean the table's first reflection made of it."""
    query = "/rest/v1/gone?select=id&flag=eq.true"
    rest.execute(sa.text("CREATE TABLE gone (id INTEGER PRIMARY KEY, flag BOOLEAN)"))
    try:
        rest.execute(sa.text("INSERT INTO gone (id, flag) VALUES (1, 1)"))
        assert rest.anon.get(query).json == [{"id": 1}]
        rest.execute(sa.text("DROP TABLE gone"))
        rest.execute(sa.text("CREATE TABLE gone (id INTEGER PRIMARY KEY, flag VARCHAR(10))"))
        rest.execute(sa.text("INSERT INTO gone (id, flag) VALUES (2, 'true')"))
        monkeypatch.setattr(reflection, "MAX_AGE", 0)
        assert rest.anon.get(query).json == [{"id": 2}]
    finally:
        rest.execute(sa.text("DROP TABLE IF EXISTS gone"))


def test_walks_are_bounded(rest, monkeypatch):
    monkeypatch.setattr(plans, "MAX_WALKS", 3)
    for n in range(1, 6):
        assert names(rest.anon.get(f"/rest/v1/items?id=eq.{n}&select=name")) == [EVERY_ITEM[n - 1]]
    with rest.app.app_context():
        assert 0 < len(state().schema.walks) <= 3


def test_kept_parses_are_bounded(rest, monkeypatch):
    monkeypatch.setattr(rest_request, "READS", {})
    monkeypatch.setattr(rest_request, "MAX_KEPT", 3)
    for n in range(1, 6):
        assert names(rest.anon.get(f"/rest/v1/items?id=eq.{n}&select=name")) == [EVERY_ITEM[n - 1]]
    assert 0 < len(rest_request.READS) <= 3
