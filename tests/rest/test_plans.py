"""Prepared read plans: one per request shape, run with each request's own values. A wrong cached
plan would show another request's values, another owner's rows, or a table as it was."""

import sqlalchemy as sa

import tables
from extensions import state
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
    monkeypatch.setattr(tables, "REFRESH_INTERVAL", 0)
    assert rest.anon.get("/rest/v1/items?select=colour&id=eq.1").json == [{"colour": None}]
    assert rest.anon.get(query).json[0]["colour"] is None  # select=* as the table is now


def test_plans_are_bounded(rest, monkeypatch):
    monkeypatch.setattr(tables, "MAX_PLANS", 3)
    for column in ("id", "name", "price", "qty", "code", "note"):
        assert rest.anon.get(f"/rest/v1/items?{column}=is.null").status_code == 200
    with rest.app.app_context():
        plans = state().schema.plans
        assert len(plans) == 3
        assert [key[1][0][0] for key in plans] == ["qty", "code", "note"]  # the most recently used
