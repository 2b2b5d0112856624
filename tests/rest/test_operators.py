"""PostgREST's other filter operators, on both databases: like/ilike/eq/… with (any) and (all) over
a {list}, isdistinct, match and imatch (regular expressions), the attacks on them, and the
PostgreSQL-only operators refused by name."""

import json
import os
import subprocess
import time

import pytest

from support import assert_rest_error, serve_app

# items: 1 Apple (code A1, note red), 2 apple pie (A2, NULL), 3 Banana (NULL, "yellow, ripe"),
# 4 cherry_tart (C1, "50% off"), 5 Date (D1, 'it's "sweet"').
CASES = [
    ([("name", "like(any).{*pie,Ban*}")], [2, 3]),
    ([("name", "like(all).{a*,*pie}")], [2]),
    ([("name", "ilike(any).{apple,date}")], [1, 5]),
    ([("name", "ilike(all).{*a*,*e*}")], [1, 2, 4, 5]),
    ([("name", 'like(any).{"*,*",Date}')], [5]),
    ([("name", "not.like(any).{A*,a*}")], [3, 4, 5]),
    ([("id", "eq(any).{1,3}")], [1, 3]),
    ([("id", "gt(all).{1,3}")], [4, 5]),
    ([("name", "like(any).{}")], []),
    ([("name", "like(all).{}")], [1, 2, 3, 4, 5]),
    ([("or", "(name.like(any).{Ban*,Dat*},id.eq.1)")], [1, 3, 5]),
    ([("name.like(any)", "{*pie,Ban*}")], [2, 3]),
    ([("code", "isdistinct.A1")], [2, 3, 4, 5]),
    ([("code", "not.isdistinct.A1")], [1]),
    ([("qty", "isdistinct.0")], [1, 3, 4, 5]),
    ([("or", "(code.isdistinct.A1,id.eq.1)")], [1, 2, 3, 4, 5]),
    ([("name", "match.^[A-C]")], [1, 3]),
    ([("name", "match.^a")], [2]),
    ([("name", "imatch.^a")], [1, 2]),
    ([("name", "imatch.PIE$")], [2]),
    ([("name", "not.match.e")], [3]),
    ([("note", r"match.\d+%")], [4]),
    ([("code", "match.1")], [1, 4, 5]),
    ([("name", "match(any).{^B,^D}")], [3, 5]),
    ([("or", "(name.imatch.^b,code.match.^C)")], [3, 4]),
    ([("qty", "match.^1")], [1]),
]


@pytest.mark.parametrize(("pairs", "expected"), CASES)
def test_operators(rest_reads, pairs, expected):
    assert rest_reads.ids(rest_reads.anon.get("/rest/v1/items", query_string=pairs)) == expected


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("name", "like(any).a*")], "list"),
        ([("name", "like(some).{a}")], 'unknown operator "like(some)"'),
        ([("name", "neq(any).{a}")], 'unknown operator "neq(any)"'),
        ([("name", "in(any).{a}")], 'unknown operator "in(any)"'),
        ([("name", "like(any).{a*")], 'missing "}"'),
        ([("id", "eq(any).{1,x}")], "integer"),
        ([("name", "match.(")], "invalid regular expression"),
        ([("name", "match." + "a" * 201)], "too long (at most 200 characters)"),
        ([("name", "match.(a+)+$")], "repeats a repeated group"),
        ([("name", "imatch.(x*)*y")], "repeats a repeated group"),
        ([("name", "match.a\x00")], "NUL"),
        ([("id", "isdistinct.abc")], "integer"),
        (
            [("tags", "cs.{a}")],
            'operator "cs" is not supported: array and range operators are PostgreSQL-only',
        ),
        ([("period", "adj.[1,2]")], 'operator "adj" is not supported: range operators'),
        ([("name", "fts(english).apple")], 'operator "fts" is not supported: full-text search'),
        ([("name", "wfts.apple")], "full-text search syntax is PostgreSQL-only"),
        ([("or", "(name.plfts.a,id.eq.1)")], 'operator "plfts" is not supported'),
    ],
)
def test_malformed_operators_are_400s(rest_reads, pairs, message):
    body = assert_rest_error(rest_reads.anon.get("/rest/v1/items", query_string=pairs), 400, pairs[0][1])
    assert message in body["message"], body


def test_too_many_quantified_values_is_a_400(rest):
    values = ",".join(f"v{n}" for n in range(250))
    body = assert_rest_error(
        rest.anon.get("/rest/v1/items", query_string={"name": f"like(any).{{{values}}}"}), 400, values
    )
    assert "too many filter conditions" in body["message"]


@pytest.mark.parametrize(
    "value",
    [
        "match.') OR 1=1 --",
        "imatch.x' UNION SELECT password FROM users --",
        "like(any).{\"') OR ('1'='1\",x}",
        "isdistinct.' OR '1'='1",
    ],
)
def test_injection_through_the_new_operators_matches_nothing(rest, value):
    response = rest.anon.get("/rest/v1/items", query_string={"name": value})
    assert response.status_code in (200, 400), response.json
    if response.status_code == 200:
        expected = [1, 2, 3, 4, 5] if value.startswith("isdistinct") else []
        assert rest.ids(response) == expected
    assert len(rest.rows("items")) == 5


def test_a_slow_pattern_within_the_bound_answers_quickly(rest):
    """The bound keeps a pattern from being both long and nested; a plain long one runs at once."""
    started = time.monotonic()
    response = rest.anon.get("/rest/v1/items", query_string={"name": "match." + "a?" * 90 + "a" * 20})
    assert response.status_code == 200 and time.monotonic() - started < 5


def test_operators_hold_under_row_policies(make_rest, tmp_path, tables_toml):
    """A new operator is ANDed with the row policy: it never reaches a row the policy hides."""
    policy = '\n[tables.items.policies]\nselect = "id <> 3"\n'
    (tmp_path / "tables.toml").write_text(tables_toml + policy)
    env = make_rest()
    assert env.ids(env.anon.get("/rest/v1/items", query_string={"name": "match.^B"})) == []
    assert env.ids(env.anon.get("/rest/v1/items", query_string={"name": "like(any).{B*,D*}"})) == [5]
    assert env.ids(env.anon.get("/rest/v1/items", query_string={"or": "(code.isdistinct.A1)"})) == [2, 4, 5]
    assert env.ids(env.service.get("/rest/v1/items", query_string={"name": "match.^B"})) == [3]


def test_operators_filter_embedded_rows(rest):
    rest.execute(
        rest.table("children").insert().values([{"item_id": 1, "label": "x1"}, {"item_id": 1, "label": "y2"}])
    )
    response = rest.anon.get(
        "/rest/v1/items",
        query_string={"select": "id,children(label)", "children.label": "match.^y", "id": "eq.1"},
    )
    assert response.json == [{"id": 1, "children": [{"label": "y2"}]}]
    response = rest.anon.get(
        "/rest/v1/items",
        query_string={"select": "id,children!inner(label)", "children.label": "like(any).{x*,z*}"},
    )
    assert response.json == [{"id": 1, "children": [{"label": "x1"}]}]


def test_supabase_js_filter_helpers(make_rest, anon_key, node_modules):
    """likeAnyOf, likeAllOf, ilikeAnyOf, ilikeAllOf, regexMatch, regexIMatch and isDistinct as
    supabase-js sends them, over waitress."""
    env = make_rest()
    base, stop = serve_app(env.app)
    try:
        done = subprocess.run(
            ["node", "filters.mjs"],
            cwd=node_modules.parent,
            env={**os.environ, "MINIBASE_URL": base, "ANON_KEY": anon_key},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop()
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "likeAnyOf": [2, 3],
        "likeAllOf": [2],
        "ilikeAnyOf": [1, 5],
        "ilikeAllOf": [1, 2, 4, 5],
        "regexMatch": [1, 3],
        "regexIMatch": [1, 2],
        "isDistinct": [2, 3, 4, 5],
        "notRegex": [3],
        "orAny": [1, 3, 5],
        "cast": {"id": "1", "label": "Apple"},
        "tooLong": "PGRST100",
    }
