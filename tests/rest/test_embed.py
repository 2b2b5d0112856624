"""Embedding related rows, on both databases: every relationship kind, hints and their errors,
`!inner`, spread, filters and paging inside an embed in both dialects, access rules that hold inside
embeds as they do for a direct read, a statement count that does not grow with the rows, and the
official Python client over a real waitress server."""

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from database import statements
from extensions import db
from rest import embeds, reads
from support import Api, assert_rest_error, serve_app

SDK = {"X-Client-Info": "supabase-js/2.109.0"}
TABLES = """
[tables.users]
select = "anon"
columns = ["user_id", "username"]

[tables.posts]
select = "anon"
insert = "anon"

[tables.comments]
select = "anon"

[tables.post_stats]
select = "anon"

[tables.tags]
select = "anon"

[tables.post_tags]
select = "anon"

[tables.reviews]
select = "anon"

[tables.legacy]
select = "anon"
references = { poster = "users.user_id" }

[tables.drafts]
select = "owner"
owner_column = "user_id"

[tables.audit]
select = "service_role"

[tables.post_notes]
select = "owner"
owner_column = "user_id"

[tables.post_titles]
select = "anon"
primary_key = "id"
references = { author_id = "users.user_id" }
"""

schema = sa.MetaData()
sa.Table("users", schema, sa.Column("user_id", sa.Integer, primary_key=True))  # the app's own
posts = sa.Table(
    "posts",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("author_id", sa.Integer, sa.ForeignKey("users.user_id"), nullable=False),
    sa.Column("title", sa.String(100), nullable=False),
)
comments = sa.Table(
    "comments",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), nullable=False),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.user_id"), nullable=False),
    sa.Column("body", sa.String(100), nullable=False),
)
post_stats = sa.Table(  # one-to-one: its key is the foreign key
    "post_stats",
    schema,
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), primary_key=True, autoincrement=False),
    sa.Column("views", sa.Integer, nullable=False),
)
tags = sa.Table(
    "tags",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("label", sa.String(20), nullable=False),
)
post_tags = sa.Table(  # the junction of a many-to-many
    "post_tags",
    schema,
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), primary_key=True, autoincrement=False),
    sa.Column("tag_id", sa.Integer, sa.ForeignKey("tags.id"), primary_key=True, autoincrement=False),
)
reviews = sa.Table(  # two keys to users: a hint must say which
    "reviews",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("writer_id", sa.Integer, nullable=False),
    sa.Column("reader_id", sa.Integer, nullable=False),
    sa.ForeignKeyConstraint(["writer_id"], ["users.user_id"], name="reviews_writer_fk"),
    sa.ForeignKeyConstraint(["reader_id"], ["users.user_id"], name="reviews_reader_fk"),
)
legacy = sa.Table(  # no declared key: tables.toml's references says where poster points
    "legacy",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("poster", sa.Integer),
    sa.Column("text", sa.String(50)),
)
drafts = sa.Table(  # read under the owner rule
    "drafts",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), nullable=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("text", sa.String(50)),
)
post_notes = sa.Table(  # one-to-one with posts, read under the owner rule: a joined to-one embed
    "post_notes",
    schema,
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), primary_key=True, autoincrement=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("note", sa.String(50), nullable=False),
)
audit = sa.Table(  # service_role only
    "audit",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), nullable=False),
)
hidden = sa.Table(  # not listed: it does not exist for the API
    "hidden",
    schema,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), nullable=False),
)
SEED = [
    (posts, [(1, 1, "Hello"), (2, 1, "Second"), (3, 2, "Bob's")]),
    (comments, [(1, 1, 2, "nice"), (2, 1, 3, "great xx"), (3, 1, 1, "thanks"), (4, 3, 1, "hi bob")]),
    (post_stats, [(1, 100), (3, 7)]),
    (tags, [(1, "news"), (2, "tech"), (3, "misc")]),
    (post_tags, [(1, 1), (1, 2), (3, 2)]),
    (reviews, [(1, 1, 2)]),
    (legacy, [(1, 2, "old"), (2, None, "orphan")]),
    (drafts, [(1, 1, 1, "ann's draft"), (2, 1, 2, "bob's draft")]),
    (post_notes, [(1, 1, "ann's note"), (3, 2, "bob's note")]),
    (audit, [(1, 1)]),
    (hidden, [(1, 1)]),
]


class Blog:
    """The app over the blog schema, its clients, and the signed-in users' tokens."""

    def __init__(self, app, anon, service, engine, tokens):
        self.app, self.anon, self.service, self.engine, self.tokens = app, anon, service, engine, tokens

    def get(self, query, token=None, **kwargs):
        response = self.anon.get(f"/rest/v1/{query}", token=token, **kwargs)
        assert response.status_code in (200, 206), response.get_data(as_text=True)
        return response.json


@pytest.fixture
def blog(make_app, database_url, tmp_path, anon_key, service_key):
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    app = make_app(TABLES_CONFIG=str(config))  # its migrations create the users table first
    anon = Api(app, anon_key)
    signed = [
        anon.sign_up(f"{name}@example.com", username=name)["access_token"] for name in ("ann", "bob", "cid")
    ]
    engine = sa.create_engine(database_url)
    schema.create_all(engine, tables=[table for table in schema.sorted_tables if table.name != "users"])
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE VIEW post_titles AS SELECT id, author_id, title FROM posts"))
        for table, rows in SEED:
            names = [column.key for column in table.c]
            connection.execute(table.insert(), [dict(zip(names, row, strict=True)) for row in rows])
    yield Blog(
        app, anon, Api(app, service_key), engine, dict(zip(("ann", "bob", "cid"), signed, strict=True))
    )
    engine.dispose()


# --- the relationships


def test_many_to_one_is_an_object_and_an_alias_renames_it(blog):
    assert blog.get("posts?select=id,title,users(username)") == [
        {"id": 1, "title": "Hello", "users": {"username": "ann"}},
        {"id": 2, "title": "Second", "users": {"username": "ann"}},
        {"id": 3, "title": "Bob's", "users": {"username": "bob"}},
    ]
    rows = blog.get("posts?select=*,author:users(username)&id=eq.3")
    assert rows == [{"id": 3, "author_id": 2, "title": "Bob's", "author": {"username": "bob"}}]


def test_one_to_many_is_an_array_empty_when_there_is_none(blog):
    assert blog.get("users?select=username,posts(id,title)") == [
        {"username": "ann", "posts": [{"id": 1, "title": "Hello"}, {"id": 2, "title": "Second"}]},
        {"username": "bob", "posts": [{"id": 3, "title": "Bob's"}]},
        {"username": "cid", "posts": []},
    ]


def test_one_to_one_is_an_object_or_null(blog):
    rows = blog.get("posts?select=id,post_stats(views)")
    assert [row["post_stats"] for row in rows] == [{"views": 100}, None, {"views": 7}]


def test_many_to_many_goes_through_the_junction(blog):
    rows = blog.get("posts?select=id,tags(label)")
    assert [row["tags"] for row in rows] == [[{"label": "news"}, {"label": "tech"}], [], [{"label": "tech"}]]
    rows = blog.get("tags?select=label,posts(id)")
    assert [row["posts"] for row in rows] == [[{"id": 1}], [{"id": 1}, {"id": 3}], []]


def test_references_in_tables_toml_relate_tables_without_keys_and_views(blog):
    assert blog.get("legacy?select=text,users(username)") == [
        {"text": "old", "users": {"username": "bob"}},
        {"text": "orphan", "users": None},
    ]
    assert blog.get("users?select=username,legacy(text)&user_id=eq.2") == [
        {"username": "bob", "legacy": [{"text": "old"}]}
    ]
    rows = blog.get("post_titles?select=title,author:users(username)&order=id.desc&limit=1")
    assert rows == [{"title": "Bob's", "author": {"username": "bob"}}]


def test_nesting_goes_four_levels_deep(blog):
    rows = blog.get(
        "users?select=username,posts(title,comments(body,users(username,posts(id))))"
        "&user_id=eq.2&posts.comments.order=id"
    )
    assert rows == [
        {
            "username": "bob",
            "posts": [
                {
                    "title": "Bob's",
                    "comments": [
                        {"body": "hi bob", "users": {"username": "ann", "posts": [{"id": 1}, {"id": 2}]}}
                    ],
                }
            ],
        }
    ]
    body = assert_rest_error(
        blog.anon.get("/rest/v1/users?select=posts(comments(users(posts(comments(id)))))"), 400
    )
    assert "at most 4" in body["message"]


def test_a_table_met_again_deeper_is_its_own_row(blog):
    # users -> posts -> comments -> users: the inner users is the commenter, not the outer author
    query = "users?select=username,posts!inner(id,comments!inner(id,users!inner(username)))"
    rows = blog.get(f"{query}&posts.comments.users.username=eq.cid")
    assert [row["username"] for row in rows] == ["ann"]
    assert rows[0]["posts"] == [{"id": 1, "comments": [{"id": 2, "users": {"username": "cid"}}]}]


# --- hints and their errors


def test_two_keys_to_one_table_need_a_hint(blog):
    """PostgREST's 300, to the letter: each candidate as `fkey using table(col) and table(col)`,
    in one order on every database, the hint naming the `details` key."""
    response = blog.anon.get("/rest/v1/reviews?select=id,users(username)")
    body = assert_rest_error(response, 300)
    # An array, as PostgREST sends it: postgrest-js and supabase-py read it so.
    assert body["details"] == [
        {
            "cardinality": "many-to-one",
            "embedding": "reviews with users",
            "relationship": f"reviews_{name}_fk using reviews({name}_id) and users(user_id)",
        }
        for name in ("reader", "writer")
    ]
    assert (
        body["message"]
        == "Could not embed because more than one relationship was found for 'reviews' and 'users'"
    )
    assert body["hint"] == (
        "Try changing 'users' to one of the following: 'users!reviews_reader_fk', 'users!reviews_writer_fk'. "
        "Find the desired relationship in the 'details' key."
    )
    rows = blog.get(
        "reviews?select=writer:users!writer_id(username),reader:users!reviews_reader_fk(username)"
    )
    assert rows == [{"writer": {"username": "ann"}, "reader": {"username": "bob"}}]


def test_no_relationship_is_a_400_naming_both_tables(blog):
    for embed in ("tags(label)", "nowhere(id)", "hidden(id)", "users!nokey(username)"):
        body = assert_rest_error(blog.anon.get(f"/rest/v1/comments?select=id,{embed}"), 400)
        assert "'comments' and '" + embed.split("(")[0].split("!")[0] + "'" in body["message"], body


@pytest.mark.parametrize(
    ("embed", "message", "details", "hint"),
    [
        (
            "postz(id)",
            "Could not find a relationship between 'comments' and 'postz' in the schema cache",
            "Searched for a foreign key relationship between 'comments' and 'postz' in the schema 'public', "
            "but no matches were found.",
            "Perhaps you meant 'posts' instead of 'postz'.",
        ),
        (
            "users!nokey(username)",
            "Could not find a relationship between 'comments' and 'users' in the schema cache",
            "Searched for a foreign key relationship between 'comments' and 'users' using the hint "
            "'nokey' in the schema 'public', but no matches were found.",
            None,
        ),
    ],
)
def test_no_relationship_is_postgrests_pgrst200(blog, embed, message, details, hint):
    body = blog.anon.get(
        f"/rest/v1/comments?select=id,{embed}", headers={"X-Client-Info": "supabase-js/2"}
    ).json
    assert body == {"code": "PGRST200", "message": message, "details": details, "hint": hint}


def test_an_embed_named_by_a_foreign_keys_constraint(blog):
    """PostgREST's `capital_country_id_fkey(name)`: the constraint alone names the relationship, from
    either end, the key in the object being its name; a key the database did not name goes by
    PostgreSQL's name for it (`posts_author_id_fkey`), on MariaDB too (which calls it `..._ibfk_1`)."""
    assert blog.get("reviews?select=id,reviews_writer_fk(username)") == [
        {"id": 1, "reviews_writer_fk": {"username": "ann"}}
    ]
    rows = blog.get("users?select=username,reviews_reader_fk(id)&order=user_id")
    assert rows[:2] == [
        {"username": "ann", "reviews_reader_fk": []},
        {"username": "bob", "reviews_reader_fk": [{"id": 1}]},
    ]
    assert blog.get("posts?select=id,by:posts_author_id_fkey(username)&id=eq.3") == [
        {"id": 3, "by": {"username": "bob"}}
    ]
    assert blog.get("posts?select=id,users!posts_author_id_fkey(username)&id=eq.3") == [
        {"id": 3, "users": {"username": "bob"}}
    ]
    body = assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,nope_fkey(id)"), 400)
    assert "'posts' and 'nope_fkey'" in body["message"]


def test_errors_in_an_embed_name_the_part(blog):
    cases = {
        "posts?select=id,users(password)": "password",
        "posts?select=id,users(nope)": "nope",
        "posts?select=id,users(username": "unbalanced",
        "posts?select=id&comments.body=eq.x": "comments",
        "posts?select=id,comments(id)&comments.limit=x": "comments.limit",
        "posts?select=id,comments(id)&comments.title=eq.x": "title",
    }
    for query, part in cases.items():
        body = assert_rest_error(blog.anon.get(f"/rest/v1/{query}"), 400)
        assert part in body["message"], (query, body)


# --- shaping embeds and parents


def test_inner_keeps_only_parents_with_a_match_and_counts_them(blog):
    response = blog.anon.get(
        "/rest/v1/posts?select=id,post_stats!inner(views)", headers={"Prefer": "count=exact"}
    )
    assert [row["id"] for row in response.json] == [1, 3]
    assert response.headers["Content-Range"] == "0-1/2"
    rows = blog.get("posts?select=id,comments!inner(body)&comments.body=like.*xx*")
    assert rows == [{"id": 1, "comments": [{"body": "great xx"}]}]
    rows = blog.get("posts?select=id,comments()&comments.body=like.*bob*")  # empty: filters only
    assert rows == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert blog.get("posts?select=id,comments!inner()&comments.body=like.*bob*") == [{"id": 3}]


def test_spread_brings_a_to_one_embed_into_its_parent(blog):
    rows = blog.get("posts?select=id,...users(author:username),...post_stats(views)")
    assert rows == [
        {"id": 1, "author": "ann", "views": 100},
        {"id": 2, "author": "ann", "views": None},
        {"id": 3, "author": "bob", "views": 7},
    ]


@pytest.mark.parametrize(
    "dialect",
    [
        "posts.title=like.*ec*",
        "posts.title.like=%25ec%25",  # %ec% as a URL carries it
        "posts.or=(title.eq.Second,title.eq.Nope)",
        "posts.title=not.in.(Hello,Bob's)",
        'posts.title.not.in=[Hello,"Bob\'s"]',
    ],
)
def test_filters_shape_embedded_rows_in_both_dialects(blog, dialect):
    rows = blog.get(f"users?select=username,posts(title)&{dialect}")
    assert rows == [
        {"username": "ann", "posts": [{"title": "Second"}]},
        {"username": "bob", "posts": []},
        {"username": "cid", "posts": []},
    ]


def test_a_filtered_to_one_embed_is_null_and_the_parent_stays(blog):
    rows = blog.get("posts?select=id,users(username)&users.username=eq.bob")
    assert [row["users"] for row in rows] == [None, None, {"username": "bob"}]


def test_order_limit_and_offset_apply_to_each_parents_embedded_rows(blog):
    rows = blog.get("posts?select=id,comments(id)&comments.order=id.desc&comments.limit=2&id=lte.3")
    assert [[c["id"] for c in row["comments"]] for row in rows] == [[3, 2], [], [4]]
    rows = blog.get("posts?select=id,comments(id)&comments.offset=1&comments.limit=1")
    assert [[c["id"] for c in row["comments"]] for row in rows] == [[2], [], []]


def test_count_in_an_embed_counts_each_parents_rows_under_the_rules(blog):
    rows = blog.get("posts?select=id,comments(count)")
    assert [row["comments"] for row in rows] == [[{"count": 3}], [{"count": 0}], [{"count": 1}]]
    rows = blog.get("users?select=username,posts(total:count)&posts.title=neq.Hello")
    assert [row["posts"] for row in rows] == [[{"total": 1}], [{"total": 1}], [{"total": 0}]]
    rows = blog.get("posts?select=id,drafts(count)&id=eq.1", token=blog.tokens["ann"])
    assert rows == [{"id": 1, "drafts": [{"count": 1}]}]  # the caller's own draft, not bob's
    assert blog.get("posts?select=id,tags(count)&id=eq.1") == [{"id": 1, "tags": [{"count": 2}]}]
    assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,audit(count)"), 401)


def test_count_and_paging_are_of_the_parents(blog):
    response = blog.anon.get(
        "/rest/v1/users?select=username,posts(id)&limit=1&offset=1", headers={"Prefer": "count=exact"}
    )
    assert response.status_code == 206
    assert response.json == [{"username": "bob", "posts": [{"id": 3}]}]
    assert response.headers["Content-Range"] == "1-1/3"


def test_one_object_and_csv_carry_the_embeds(blog):
    response = blog.anon.get(
        "/rest/v1/posts?select=id,author:users(username)&id=eq.1",
        headers={"Accept": "application/vnd.pgrst.object+json"},
    )
    assert response.json == {"id": 1, "author": {"username": "ann"}}
    response = blog.anon.get(
        "/rest/v1/posts?select=id,author:users(username)&id=eq.1", headers={"Accept": "text/csv"}
    )
    assert response.get_data(as_text=True).splitlines() == ["id,author", '1,"{""username"": ""ann""}"']


# --- access rules inside embeds


def test_an_embedded_table_is_read_under_its_own_rule(blog):
    assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,audit(id)"), 401)
    assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,audit(id)", token=blog.tokens["ann"]), 403)
    rows = blog.service.get("/rest/v1/posts?select=id,audit(id)&id=eq.1").json
    assert rows == [{"id": 1, "audit": [{"id": 1}]}]
    # nested, and inside !inner: the same refusal
    assert_rest_error(blog.anon.get("/rest/v1/users?select=posts(audit!inner(id))"), 401)


def test_an_owner_rule_embeds_the_callers_rows_only(blog):
    assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,drafts(text)"), 401)
    for name, text in (("ann", "ann's draft"), ("bob", "bob's draft")):
        rows = blog.get("posts?select=id,drafts(text)&id=eq.1", token=blog.tokens[name])
        assert rows == [{"id": 1, "drafts": [{"text": text}]}]
    assert blog.get("posts?select=id,drafts!inner(id)", token=blog.tokens["cid"]) == []
    # a filter cannot reach another owner's rows either
    assert blog.get("posts?select=id,drafts(text)&drafts.user_id=eq.2&id=eq.1", token=blog.tokens["ann"]) == [
        {"id": 1, "drafts": []}
    ]


def test_an_embed_never_shows_a_column_the_table_does_not_expose(blog):
    rows = blog.get("posts?select=id,users(*)&id=eq.1")
    assert rows == [{"id": 1, "users": {"user_id": 1, "username": "ann"}}]
    for query in ("users(email)", "users(password)", "users!inner(id)"):
        assert_rest_error(blog.anon.get(f"/rest/v1/posts?select=id,{query}"), 400)
    assert_rest_error(blog.anon.get("/rest/v1/posts?select=id,users(username)&users.password=like.*"), 400)


def test_a_write_returns_its_rows_with_their_embeds(blog):
    headers = {"Prefer": "return=representation"}
    select = "select=id,title,author:users(username),comments(body)"
    response = blog.anon.post(
        f"/rest/v1/posts?{select}",
        json=[{"id": 9, "author_id": 2, "title": "new"}, {"id": 8, "author_id": 1, "title": "newer"}],
        headers=headers,
    )
    assert response.status_code == 201, response.json
    assert response.json == [
        {"id": 9, "title": "new", "author": {"username": "bob"}, "comments": []},
        {"id": 8, "title": "newer", "author": {"username": "ann"}, "comments": []},
    ]
    response = blog.service.patch(f"/rest/v1/posts?{select}&id=eq.1", json={"title": "Hi"}, headers=headers)
    assert response.status_code == 200
    assert response.json == [
        {"id": 1, "title": "Hi", "author": {"username": "ann"},
         "comments": [{"body": "nice"}, {"body": "great xx"}, {"body": "thanks"}]}
    ]  # fmt: skip
    response = blog.service.delete(
        "/rest/v1/posts?select=id,...users(username)&id=eq.9",
        headers={**headers, "Accept": "application/vnd.pgrst.object+json"},
    )
    assert response.status_code == 200 and response.json == {"id": 9, "username": "bob"}
    assert blog.get("posts?id=in.(8,9)&select=id") == [{"id": 8}]
    # without return=representation the select does not apply
    response = blog.anon.post(
        "/rest/v1/posts?select=id,users(username)", json={"id": 7, "author_id": 1, "title": "x"}
    )
    assert response.status_code == 201 and not response.get_data()


def test_a_bad_embed_on_a_write_is_a_400_and_writes_nothing(blog):
    headers = {"Prefer": "return=representation"}
    for query in ("select=id,nowhere(id)", "select=id,audit(id)", "select=id,users(id)"):
        response = blog.anon.post(
            f"/rest/v1/posts?{query}", json={"id": 9, "author_id": 1, "title": "x"}, headers=headers
        )
        assert response.status_code in (400, 401), response.json
    response = blog.service.patch(
        "/rest/v1/posts?comments.body=eq.nice", json={"title": "all"}, headers=headers
    )
    assert "embedded" in assert_rest_error(response, 400)["message"]
    assert blog.get("posts?id=eq.9") == []
    assert [row["title"] for row in blog.get("posts?select=title")] == ["Hello", "Second", "Bob's"]


# --- no N+1


def test_the_number_of_queries_does_not_grow_with_the_rows(blog, monkeypatch):
    with blog.engine.begin() as connection:
        connection.execute(
            posts.insert(), [{"id": n, "author_id": 1 + n % 3, "title": f"p{n}"} for n in range(4, 101)]
        )
        connection.execute(
            comments.insert(), [{"post_id": n, "user_id": 1, "body": f"c{n}"} for n in range(4, 101)]
        )
    query = "posts?select=id,users(username),comments(body,users(username)),tags(label),post_stats(views)"
    blog.get(query)  # the tables are reflected once, on first use
    with blog.app.app_context():
        engine = db.engine
    sent = []

    def record(connection, cursor, statement, *args):
        sent.append(statement)

    run = statements.run_prepared

    def run_and_record(engine, values, *prepared, **options):
        sent.extend(statement.sql for statement in prepared)
        return run(engine, values, *prepared, **options)

    monkeypatch.setattr(statements, "run_prepared", run_and_record)
    counts = {}
    for parents in (1, 10, 100):
        sent.clear()
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            rows = blog.get(f"{query}&id=lte.{parents}")
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
        assert len(rows) == parents and all(row["users"] for row in rows)
        counts[parents] = len([s for s in sent if s.lstrip().upper().startswith("SELECT")])
    # the posts with post_stats (a to-one embed, joined), then one per other embed: users is not
    # joined, its name being met again under comments
    assert counts[1] == counts[10] == counts[100] == 5, counts


# --- prepared plans: one per shape of request, each request's values its own


def test_a_planned_shape_reads_each_requests_values(blog, monkeypatch):
    query = "posts?select=id,users(username),comments(body)&comments.body=like.{}&id=lte.{}"
    assert blog.get(query.format("*x*", 3)) == [
        {"id": 1, "users": {"username": "ann"}, "comments": [{"body": "great xx"}]},
        {"id": 2, "users": {"username": "ann"}, "comments": []},
        {"id": 3, "users": {"username": "bob"}, "comments": []},
    ]
    planned = []
    plan = embeds.Planner.plan
    monkeypatch.setattr(embeds.Planner, "plan", lambda self, *args: planned.append(1) or plan(self, *args))
    assert blog.get(query.format("*i*", 1)) == [
        {"id": 1, "users": {"username": "ann"}, "comments": [{"body": "nice"}]}
    ]
    assert blog.get(query.format("*b*", 3))[2] == {
        "id": 3, "users": {"username": "bob"}, "comments": [{"body": "hi bob"}]
    }  # fmt: skip
    assert planned == []  # the shape was planned by the first request
    # an `in` list runs through SQLAlchemy, with the same answer
    rows = blog.get("posts?select=id,comments(body)&comments.body=in.(nice,hi bob)&id=lte.3")
    assert [row["comments"] for row in rows] == [[{"body": "nice"}], [], [{"body": "hi bob"}]]


def test_parents_keys_in_several_chunks_give_every_parent_its_rows(blog, monkeypatch):
    query = "posts?select=id,users(username),comments(id),tags(label),post_stats(count)"
    expected = blog.get(query)
    monkeypatch.setattr(reads, "KEY_CHUNK", 2)
    assert blog.get(query) == expected
    assert [row["post_stats"] for row in expected] == [{"count": 1}, {"count": 0}, {"count": 1}]
    assert [len(row["comments"]) for row in expected] == [3, 0, 1]


def test_a_joined_to_one_embed_keeps_its_filters_rules_and_own_embeds(blog):
    """A to-one embed read by a LEFT JOIN in its parent's query: its filters and rules in the ON
    (a parent without a match keeps its row), its own embeds fetched by its key."""
    rows = blog.get("posts?select=id,author:users(username,posts(id))&order=id")
    assert rows == [
        {"id": 1, "author": {"username": "ann", "posts": [{"id": 1}, {"id": 2}]}},
        {"id": 2, "author": {"username": "ann", "posts": [{"id": 1}, {"id": 2}]}},
        {"id": 3, "author": {"username": "bob", "posts": [{"id": 3}]}},
    ]
    rows = blog.get("posts?select=id,...post_stats(views),users(username)&users.username=eq.bob")
    assert rows == [
        {"id": 1, "views": 100, "users": None},
        {"id": 2, "views": None, "users": None},
        {"id": 3, "views": 7, "users": {"username": "bob"}},
    ]
    response = blog.anon.get("/rest/v1/posts?select=id,post_stats(views)&limit=1&offset=2")
    assert response.json == [{"id": 3, "post_stats": {"views": 7}}]


def test_a_joined_to_one_embed_under_an_owner_rule_shows_each_caller_their_own_row(blog):
    """post_notes is one-to-one with posts, so it is read by a LEFT JOIN whose ON carries the owner
    rule: one plan serves both callers, each with their own id, and a row of another owner is
    null, never shown; without a signed-in caller the rule refuses, as for a direct read."""
    query = "posts?select=id,post_notes(note)&order=id"
    for _ in range(2):  # the second round runs the plans the first one made
        assert blog.get(query, token=blog.tokens["ann"]) == [
            {"id": 1, "post_notes": {"note": "ann's note"}},
            {"id": 2, "post_notes": None},
            {"id": 3, "post_notes": None},
        ]
        assert blog.get(query, token=blog.tokens["bob"]) == [
            {"id": 1, "post_notes": None},
            {"id": 2, "post_notes": None},
            {"id": 3, "post_notes": {"note": "bob's note"}},
        ]
    assert_rest_error(blog.anon.get(f"/rest/v1/{query}"), 401)
    # a filter on the embed cannot reach another owner's row either
    rows = blog.get(
        "posts?select=id,post_notes(note)&post_notes.user_id=eq.2&id=eq.3", token=blog.tokens["ann"]
    )
    assert rows == [{"id": 3, "post_notes": None}]


# --- the official Python client, over HTTP


def test_postgrest_py_embeds_over_waitress(blog, anon_key):
    postgrest = pytest.importorskip("postgrest")
    base, stop = serve_app(blog.app)
    try:
        with contextlib.closing(httpx.Client()) as http:
            client = postgrest.SyncPostgrestClient(
                f"{base}/rest/v1",
                headers={"apikey": anon_key, "Authorization": f"Bearer {anon_key}"},
                http_client=http,
            )
            rows = client.from_("posts").select("*, author:users(username)").eq("id", 3).execute().data
            assert rows == [{"id": 3, "author_id": 2, "title": "Bob's", "author": {"username": "bob"}}]
            rows = (
                client.from_("users")
                .select("username, posts!inner(title)")
                .like("posts.title", "*ec*")
                .execute()
                .data
            )
            assert rows == [{"username": "ann", "posts": [{"title": "Second"}]}]
    finally:
        stop()


def test_supabase_js_embeds_as_the_docs_show(blog, anon_key, node_modules):
    js = node_modules.parent
    blog.app.config["DB_AGGREGATES_ENABLED"] = True
    base, stop = serve_app(blog.app)
    try:
        env = {**os.environ, "MINIBASE_URL": base, "ANON_KEY": anon_key}
        done = subprocess.run(
            ["node", "embed.mjs"], cwd=js, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        stop()
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["posts"][0] == {
        "id": 1,
        "title": "Hello",
        "author": {"username": "ann"},
        "comments": [{"body": "nice"}, {"body": "great xx"}, {"body": "thanks"}],
    }
    assert out["filtered"] == [{"username": "ann", "posts": [{"title": "Second"}]}]
    assert out["ambiguous"] == "PGRST201"
    assert out["single"] == {"id": 3, "username": "bob"}
    assert out["grouped"] == [{"username": "ann", "n": 2}, {"username": "bob", "n": 1}]


def test_the_docs_embedding_examples_run_as_written(blog):
    docs = (Path(__file__).resolve().parents[2] / "docs" / "rest.md").read_text()
    section = docs[docs.index("### Related rows") : docs.index("## 3. Write")]
    queries = re.findall(r"localhost:8000/rest/v1/([^'\s]+)'", section)
    queries += re.findall(r"`((?:posts|users)\?select=[^`]+)`", section)
    assert len(queries) >= 4, queries
    for query in queries:
        response = blog.anon.get(f"/rest/v1/{query}")
        assert response.status_code == 200, (query, response.json)


def test_one_table_embedded_twice_under_one_name_is_postgresqls_42712(blog):
    """PostgREST names each embed's subquery `parent_name_depth`: twice the same name is PostgreSQL's
    42712; under two names (or one column under two names) both are read."""
    response = blog.anon.get(
        "/rest/v1/reviews?select=id,users!writer_id(username),users!reader_id(username)",
        headers={"X-Client-Info": "supabase-js/2"},
    )
    assert response.status_code == 400
    assert response.json == {
        "code": "42712",
        "message": 'table name "reviews_users_1" specified more than once',
        "details": None,
        "hint": None,
    }
    deeper = blog.anon.get("/rest/v1/posts?select=id,comments(users(username),users(user_id))")
    assert deeper.status_code == 400 and deeper.json["message"] == (
        'table name "comments_users_2" specified more than once'
    )
    assert blog.get("reviews?select=a:id,b:id,w:users!writer_id(username),r:users!reader_id(username)") == [
        {"a": 1, "b": 1, "w": {"username": "ann"}, "r": {"username": "bob"}}
    ]


def test_aggregates_inside_an_embed(blog):
    """PostgREST's `posts(count())`: an embed's aggregates, grouped by its other columns, for each
    parent; a parent without rows gets the one group of none (a count of 0, other aggregates null).
    Behind DB_AGGREGATES_ENABLED, as the table's own aggregates."""
    query = "users?select=username,posts(count())&order=user_id"
    assert blog.anon.get(f"/rest/v1/{query}").json["code"] == 400  # the setting is off
    blog.app.config["DB_AGGREGATES_ENABLED"] = True
    assert blog.get(query) == [
        {"username": "ann", "posts": [{"count": 2}]},
        {"username": "bob", "posts": [{"count": 1}]},
        {"username": "cid", "posts": [{"count": 0}]},
    ]
    rows = blog.get("posts?select=id,comments(n:count(),last:user_id.max())&order=id")
    assert rows == [
        {"id": 1, "comments": [{"n": 3, "last": 3}]},
        {"id": 2, "comments": [{"n": 0, "last": None}]},
        {"id": 3, "comments": [{"n": 1, "last": 1}]},
    ]
    grouped = blog.get("posts?select=id,comments(user_id,count())&id=eq.3")
    assert grouped == [{"id": 3, "comments": [{"user_id": 1, "count": 1}]}]
    assert_rest_error(blog.anon.get("/rest/v1/users?select=posts(count(),comments(id))"), 400)


def test_aggregates_through_a_to_one_spread_group_the_parent_as_postgrest(blog):
    """PostgREST's AggregateFunctionsSpec: a to-one spread's columns are the parent's, so the parent
    groups by them and a spread's aggregate counts the parent's rows; through spreads of spreads,
    and inside an embed. Aggregates in a spread of many rows are its 400 PGRST127."""
    blog.app.config["DB_AGGREGATES_ENABLED"] = True
    assert blog.get("posts?select=...users(count())") == [{"count": 3}]
    assert blog.get("posts?select=id,...users(count())") == [
        {"id": 1, "count": 1}, {"id": 2, "count": 1}, {"id": 3, "count": 1}
    ]  # fmt: skip
    assert blog.get("posts?select=n:count(),...users(username)&order=author_id.desc") == [
        {"n": 1, "username": "bob"}, {"n": 2, "username": "ann"}
    ]  # fmt: skip
    assert blog.get("comments?select=...posts(...users(username)),n:count(),last:id.max()") == [
        {"username": "ann", "n": 3, "last": 3}, {"username": "bob", "n": 1, "last": 4}
    ]  # fmt: skip
    nested = blog.get("users?select=username,posts(id.sum(),...post_stats(v:views.sum()))&order=user_id")
    assert nested == [
        {"username": "ann", "posts": [{"sum": 3, "v": 100}]},
        {"username": "bob", "posts": [{"sum": 3, "v": 7}]},
        {"username": "cid", "posts": [{"sum": None, "v": None}]},
    ]
    grouped = blog.get("users?select=username,posts(count(),...post_stats(views))&user_id=eq.1")
    assert grouped == [
        {"username": "ann", "posts": [{"count": 1, "views": 100}, {"count": 1, "views": None}]}
    ]
    response = blog.anon.get("/rest/v1/posts?select=id,...comments(count())", headers=SDK)
    assert response.status_code == 400 and response.json == {
        "code": "PGRST127",
        "message": "Feature not implemented",
        "details": "Aggregates are not implemented for one-to-many or many-to-many spreads.",
        "hint": None,
    }


def test_a_spread_aggregated_over_keeps_its_tables_rules(blog):
    """The spread's table joins as a subquery under its own rule and policy: an owner rule counts the
    caller's rows only, and a rule that refuses the caller is its 401, as a direct read."""
    blog.app.config["DB_AGGREGATES_ENABLED"] = True
    query = "posts?select=...post_notes(notes:count()),n:count()"
    assert_rest_error(blog.anon.get(f"/rest/v1/{query}"), 401)
    assert blog.get(query, token=blog.tokens["ann"]) == [{"notes": 1, "n": 3}]
    assert blog.get(query, token=blog.tokens["cid"]) == [{"notes": 0, "n": 3}]
    assert_rest_error(blog.service.get("/rest/v1/posts?select=...audit(count())"), 400)  # to-many


def test_a_column_twice_and_a_missing_one_in_an_embed_as_postgrest_answers(blog):
    """`select=id,id` is PostgREST's object with the key once (its JSON repeats it; a client keeps
    the last); an unknown column of an embedded table is named as PostgREST's query aliases it."""
    assert blog.get("posts?select=id,id,t:title,t:id&id=eq.1") == [{"id": 1, "t": 1}]
    assert blog.get("posts?select=id,users(username,username)&id=eq.3") == [
        {"id": 3, "users": {"username": "bob"}}
    ]
    response = blog.anon.get("/rest/v1/users?select=username,posts(sum)", headers=SDK)
    assert response.json == {
        "code": "42703", "message": "column posts_1.sum does not exist", "details": None, "hint": None
    }  # fmt: skip
    near = blog.anon.get("/rest/v1/users?select=posts(titel)", headers=SDK).json
    assert near["hint"] == 'Perhaps you meant to reference the column "posts_1.title".'
    far = blog.anon.get("/rest/v1/posts?select=users", headers=SDK).json  # PostgreSQL's: too far
    assert far["message"] == "column posts.users does not exist" and far["hint"] is None
