"""Embedding as PostgREST names it beyond a table: by a foreign key column (`item_id(*)`), a
table that references itself (PostgREST's convention for the two directions), and the spread of a
to-many embed into correlated arrays; on both databases."""

import pytest
import sqlalchemy as sa

from support import Api, assert_rest_error

TABLES = """
[tables.nodes]
select = "anon"

[tables.hidden_nodes]
select = "anon"

[tables.hidden_nodes.policies]
select = "secret = 0"
"""


@pytest.fixture
def tree(make_app, database_url, tmp_path, anon_key):
    engine = sa.create_engine(database_url)
    metadata = sa.MetaData()
    for name, extra in (("nodes", []), ("hidden_nodes", [sa.Column("secret", sa.Integer, nullable=False)])):
        sa.Table(
            name,
            metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("parent_id", sa.Integer, sa.ForeignKey(f"{name}.id"), nullable=True),
            sa.Column("name", sa.String(20), nullable=False),
            *extra,
        )
    metadata.create_all(engine)
    rows = [(1, None, "root"), (2, 1, "a"), (3, 1, "b"), (4, 2, "a1")]
    with engine.begin() as connection:
        connection.execute(
            metadata.tables["nodes"].insert(),
            [dict(zip(("id", "parent_id", "name"), r, strict=True)) for r in rows],
        )
        connection.execute(
            metadata.tables["hidden_nodes"].insert(),
            [
                {"id": 1, "parent_id": None, "name": "root", "secret": 0},
                {"id": 2, "parent_id": 1, "name": "x", "secret": 1},
            ],
        )
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    return Api(make_app(TABLES_CONFIG=str(config)), anon_key)


def get(api, path):
    response = api.get(f"/rest/v1/{path}")
    assert response.status_code == 200, response.json
    return response.json


def test_a_table_that_references_itself_reads_both_ways(tree):
    # Named by its table (with the key's column as a hint or not): the rows that point here.
    children = get(tree, "nodes?select=name,children:nodes!parent_id(name)&id=lte.2")
    assert children == [
        {"name": "root", "children": [{"name": "a"}, {"name": "b"}]},
        {"name": "a", "children": [{"name": "a1"}]},
    ]
    assert get(tree, "nodes?select=name,nodes(name)&id=eq.3") == [{"name": "b", "nodes": []}]
    # Named by the key's column: the row it points to.
    parents = get(tree, "nodes?select=name,parent:parent_id(name)&order=id")
    assert [row["parent"] for row in parents] == [None, {"name": "root"}, {"name": "root"}, {"name": "a"}]
    assert get(tree, "nodes?select=name,parent_id(name)&id=eq.4") == [
        {"name": "a1", "parent_id": {"name": "a"}}
    ]
    nested = get(tree, "nodes?select=name,parent:parent_id(name,parent:parent_id(name))&id=eq.4")
    assert nested == [{"name": "a1", "parent": {"name": "a", "parent": {"name": "root"}}}]
    both = get(tree, "nodes?select=name,up:parent_id(name),down:nodes!parent_id(name)&id=eq.2")
    assert both == [{"name": "a", "up": {"name": "root"}, "down": [{"name": "a1"}]}]
    inner = get(tree, "nodes?select=name,kids:nodes!inner(name)&kids.name=eq.a1")
    assert inner == [{"name": "a", "kids": [{"name": "a1"}]}]


def test_a_self_embed_keeps_to_the_row_policy(tree):
    assert get(tree, "hidden_nodes?select=name,kids:hidden_nodes(name)") == [{"name": "root", "kids": []}]
    assert get(tree, "hidden_nodes?select=name,up:parent_id(name)") == [{"name": "root", "up": None}]


def test_a_column_without_a_key_is_no_relationship(tree):
    body = assert_rest_error(tree.get("/rest/v1/nodes?select=id,name(id)"), 400)
    assert "Could not find a relationship" in body["message"]


def test_an_embed_named_by_its_foreign_key_column(rest):
    rest.execute(
        rest.table("children").insert().values([{"item_id": 1, "label": "x"}, {"item_id": 3, "label": "y"}])
    )
    assert rest.anon.get("/rest/v1/children?select=id,item_id(name)").json == [
        {"id": 1, "item_id": {"name": "Apple"}},
        {"id": 2, "item_id": {"name": "Banana"}},
    ]
    assert rest.anon.get("/rest/v1/children?select=label,item:item_id(id,name)&id=eq.2").json == [
        {"label": "y", "item": {"id": 3, "name": "Banana"}}
    ]


def test_spreading_a_to_many_embed_makes_correlated_arrays(rest):
    children = [{"item_id": 1, "label": "x"}, {"item_id": 1, "label": "y"}, {"item_id": 3, "label": "z"}]
    rest.execute(rest.table("children").insert().values(children))
    response = rest.anon.get(
        "/rest/v1/items",
        query_string={
            "select": "id,...children(labels:label,ids:id)",
            "id": "lte.3",
            "children.order": "id.desc",
        },
    )
    assert response.status_code == 200, response.json
    assert response.json == [
        {"id": 1, "labels": ["y", "x"], "ids": [2, 1]},
        {"id": 2, "labels": [], "ids": []},
        {"id": 3, "labels": ["z"], "ids": [3]},
    ]


FLAGGED = """
[tables.labels]
select = "anon"

[tables.notes]
select = "anon"

[tables.notes.policies]
select = "flag = 0"
"""


@pytest.fixture
def flagged(make_app, database_url, tmp_path, anon_key):
    """notes under a row policy whose SQL names `flag` without its table, and labels, the to-one
    embed of a note, which has a `flag` of its own."""
    engine = sa.create_engine(database_url)
    metadata = sa.MetaData()
    labels = sa.Table(
        "labels",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("flag", sa.Integer, nullable=False),
    )
    notes = sa.Table(
        "notes",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("label_id", sa.Integer, sa.ForeignKey("labels.id"), nullable=False),
        sa.Column("flag", sa.Integer, nullable=False),
    )
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(labels.insert(), [{"id": 1, "flag": 1}, {"id": 2, "flag": 0}])
        connection.execute(
            notes.insert(),
            [{"id": 1, "label_id": 1, "flag": 0}, {"id": 2, "label_id": 2, "flag": 1}],
        )
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(FLAGGED)
    return Api(make_app(TABLES_CONFIG=str(config)), anon_key)


def test_a_to_one_embed_under_a_parent_row_policy_keeps_the_policy_to_its_table(flagged):
    # The policy's `flag` is the note's: the label's own flag neither hides nor shows a note.
    rows = get(flagged, "notes?select=id,labels(id,flag)")
    assert rows == [{"id": 1, "labels": {"id": 1, "flag": 1}}]
    rows = get(flagged, "labels?select=id,notes(id)&order=id")
    assert rows == [{"id": 1, "notes": [{"id": 1}]}, {"id": 2, "notes": []}]
