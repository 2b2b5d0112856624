"""Who may do what: each role against each rule, and owners kept to their own rows."""

import pytest

from support import assert_rest_error

REPRESENTATION = {"Prefer": "return=representation"}

# rule -> role -> (select, insert, update, delete) status when refused, or None when allowed.
EXPECTED = {
    "anon": {"anon": None, "authenticated": None, "service_role": None},
    "authenticated": {"anon": 401, "authenticated": None, "service_role": None},
    "owner": {"anon": 401, "authenticated": None, "service_role": None},
    "service_role": {"anon": 401, "authenticated": 403, "service_role": None},
}


@pytest.fixture
def people(rest):
    """Two signed-up users, A and B: (id, token) each."""
    a = rest.anon.sign_up(email="a@example.com")
    b = rest.anon.sign_up(email="b@example.com")
    return {"a": (a["user"]["id"], a["access_token"]), "b": (b["user"]["id"], b["access_token"])}


def seed(rest, people):
    """One row owned by A and one by B in every rule table, put there with the service key."""
    a, b = people["a"][0], people["b"][0]
    for rule in EXPECTED:
        response = rest.service.post(
            f"/rest/v1/t_{rule}", json=[{"user_id": a, "label": "a"}, {"user_id": b, "label": "b"}]
        )
        assert response.status_code == 201


@pytest.mark.parametrize("rule", list(EXPECTED))
@pytest.mark.parametrize("role", ["anon", "authenticated", "service_role"])
def test_each_role_against_each_rule(rest, people, rule, role):
    seed(rest, people)
    table = f"t_{rule}"
    path = f"/rest/v1/{table}"
    client = rest.service if role == "service_role" else rest.anon
    token = people["a"][1] if role == "authenticated" else None
    refused = EXPECTED[rule][role]
    owner_only = rule == "owner" and role == "authenticated"
    a_id = people["a"][0]

    response = client.get(path, token=token)
    if refused:
        assert_rest_error(response, refused)
    else:
        assert [row["label"] for row in response.json] == (["a"] if owner_only else ["a", "b"])

    response = client.post(path, json={"label": "new"}, token=token, headers=REPRESENTATION)
    if refused:
        assert_rest_error(response, refused)
    else:
        assert response.status_code == 201
        assert response.json[0]["user_id"] == (a_id if owner_only else None)

    response = client.patch(f"{path}?id=gte.0", json={"label": "changed"}, token=token)
    if refused:
        assert_rest_error(response, refused)
    else:
        assert response.status_code == 204
    labels = {row["label"] for row in rest.rows(table) if row["user_id"] == people["b"][0]}
    assert labels == ({"b"} if refused or owner_only else {"changed"})

    response = client.delete(f"{path}?id=gte.0", token=token)
    if refused:
        assert_rest_error(response, refused)
        assert len(rest.rows(table)) == 2
    else:
        assert response.status_code == 204
        remaining = [row["user_id"] for row in rest.rows(table)]
        assert remaining == ([people["b"][0]] if owner_only else [])


def test_refusals_come_before_anything_else_is_looked_at(rest, people):
    token = people["a"][1]
    assert_rest_error(rest.anon.get("/rest/v1/t_service_role?nope=eq.1&select=secret"), 401)
    assert_rest_error(rest.anon.get("/rest/v1/t_service_role?nope=eq.1", token=token), 403)
    assert_rest_error(rest.anon.post("/rest/v1/t_authenticated", data=b"not json"), 401)
    assert_rest_error(rest.anon.delete("/rest/v1/t_owner"), 401)


def test_representation_needs_the_select_rule_too(rest, people):
    assert rest.anon.post("/rest/v1/inbox", json={"message": "hello"}).status_code == 201
    assert_rest_error(rest.anon.post("/rest/v1/inbox", json={"message": "x"}, headers=REPRESENTATION), 401)
    refused = rest.anon.post(
        "/rest/v1/inbox", json={"message": "x"}, token=people["a"][1], headers=REPRESENTATION
    )
    assert_rest_error(refused, 403)
    assert_rest_error(rest.anon.get("/rest/v1/inbox"), 401)
    assert [row["message"] for row in rest.rows("inbox")] == ["hello"]
    assert rest.service.get("/rest/v1/inbox").json == [{"id": 1, "message": "hello"}]


def test_owner_isolation(rest, people):
    a_id, a_token = people["a"]
    b_id, b_token = people["b"]
    created = rest.anon.post(
        "/rest/v1/notes", json={"body": "A's secret"}, token=a_token, headers=REPRESENTATION
    )
    assert created.status_code == 201 and created.json[0]["user_id"] == a_id
    note = created.json[0]["id"]
    rest.anon.post("/rest/v1/notes", json={"body": "B's note"}, token=b_token)

    assert [row["body"] for row in rest.anon.get("/rest/v1/notes", token=b_token).json] == ["B's note"]
    assert rest.anon.get(f"/rest/v1/notes?id=eq.{note}", token=b_token).json == []
    counted = rest.anon.get("/rest/v1/notes", token=b_token, headers={"Prefer": "count=exact"})
    assert counted.headers["Content-Range"] == "0-0/1"

    patched = rest.anon.patch(
        f"/rest/v1/notes?id=eq.{note}", json={"body": "hacked"}, token=b_token, headers=REPRESENTATION
    )
    assert patched.status_code == 200 and patched.json == []
    deleted = rest.anon.delete(f"/rest/v1/notes?id=eq.{note}", token=b_token, headers=REPRESENTATION)
    assert deleted.status_code == 200 and deleted.json == []
    assert rest.rows("notes")[0] == {"id": note, "user_id": a_id, "body": "A's secret"}

    assert_rest_error(
        rest.anon.post("/rest/v1/notes", json={"body": "x", "user_id": a_id}, token=b_token), 403
    )
    assert_rest_error(
        rest.anon.post("/rest/v1/notes", json={"body": "x", "user_id": str(a_id)}, token=b_token), 403
    )
    bulk = [{"body": "mine", "user_id": b_id}, {"body": "theirs", "user_id": a_id}]
    assert_rest_error(rest.anon.post("/rest/v1/notes", json=bulk, token=b_token), 403)
    mine = rest.anon.get("/rest/v1/notes", token=b_token).json[0]["id"]
    assert_rest_error(
        rest.anon.patch(f"/rest/v1/notes?id=eq.{mine}", json={"user_id": a_id}, token=b_token), 403
    )
    upsert = {"Prefer": "resolution=merge-duplicates"}
    taken = {"id": note, "user_id": b_id, "body": "taken over"}
    assert_rest_error(rest.anon.post("/rest/v1/notes", json=taken, token=b_token, headers=upsert), 403)
    ignored = rest.anon.post(
        "/rest/v1/notes", json=taken, token=b_token, headers={"Prefer": "resolution=ignore-duplicates"}
    )
    assert ignored.status_code == 201
    assert [(row["user_id"], row["body"]) for row in rest.rows("notes")] == [
        (a_id, "A's secret"),
        (b_id, "B's note"),
    ]

    own = rest.anon.post(
        "/rest/v1/notes",
        json={"id": note, "body": "edited"},
        token=a_token,
        headers={"Prefer": "resolution=merge-duplicates,return=representation"},
    )
    assert own.status_code == 200 and own.json[0]["body"] == "edited"  # merged, none inserted
    assert_rest_error(rest.anon.get("/rest/v1/notes"), 401)
    assert len(rest.service.get("/rest/v1/notes").json) == 2


def test_owner_may_set_the_owner_column_to_themselves(rest, people):
    a_id, a_token = people["a"]
    response = rest.anon.post(
        "/rest/v1/notes", json={"body": "x", "user_id": a_id}, token=a_token, headers=REPRESENTATION
    )
    assert response.status_code == 201 and response.json[0]["user_id"] == a_id
    patched = rest.anon.patch("/rest/v1/notes?id=gt.0", json={"user_id": a_id, "body": "y"}, token=a_token)
    assert patched.status_code == 204 and rest.rows("notes")[0]["body"] == "y"


def test_service_role_passes_every_rule_and_sets_any_owner(rest, people):
    b_id = people["b"][0]
    response = rest.service.post(
        "/rest/v1/notes", json={"body": "for b", "user_id": b_id}, headers=REPRESENTATION
    )
    assert response.status_code == 201 and response.json[0]["user_id"] == b_id
    assert_rest_error(rest.service.post("/rest/v1/notes", json={"body": "nobody"}), 400)


def test_a_bad_or_dead_token_is_a_401_even_where_anon_may_read(rest, people):
    assert_rest_error(rest.anon.get("/rest/v1/items", token="not-a-jwt"), 401)
    token = people["a"][1]
    assert rest.anon.get("/rest/v1/items", token=token).status_code == 200
    assert rest.anon.post("/auth/v1/logout", token=token).status_code == 204
    assert_rest_error(rest.anon.get("/rest/v1/items", token=token), 401)
    assert_rest_error(rest.anon.post("/rest/v1/items", json={"name": "x"}, token=token), 401)


def test_api_key_is_required(rest):
    response = rest.anon.client.get("/rest/v1/items")
    body = assert_rest_error(response, 401)
    assert body["message"] == "No API key found in request"
    assert rest.ids(rest.anon.client.get(f"/rest/v1/items?apikey={rest.anon.key}&limit=1")) == [1]


def test_the_service_key_as_bearer_gives_the_service_role(rest):
    response = rest.anon.get("/rest/v1/notes", token=rest.service.key)
    assert response.status_code == 200 and response.json == []
