"""Row policies ([tables.NAME.policies]): which rows each caller may see and change, in the SQL, on
SQLite and MariaDB. Posts everyone reads once published and only their author as drafts; projects a
team's members see; deletes an editor (app_metadata.role, set by an administrator) may make."""

import pytest
import requests
import sqlalchemy as sa

from support import Api, assert_rest_error, serve_app
from variables import ConfigError

metadata = sa.MetaData()
posts = sa.Table(
    "posts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("author_id", sa.Integer, nullable=False, index=True),
    sa.Column("title", sa.String(50), nullable=False, unique=True),
    sa.Column("published", sa.Integer, nullable=False, server_default="0"),
)
comments = sa.Table(
    "comments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id"), nullable=False),
    sa.Column("body", sa.String(50), nullable=False),
)
members = sa.Table(
    "members",
    metadata,
    sa.Column("team_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("user_id", sa.Integer, primary_key=True, autoincrement=False),
)
attachments = sa.Table(
    "attachments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("path", sa.String(100), nullable=False),
)
projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("team_id", sa.Integer, nullable=False),
    sa.Column("name", sa.String(50), nullable=False),
)

TABLES = """
[tables.posts]
select = "anon"
insert = "authenticated"
update = "authenticated"
delete = "authenticated"

[tables.posts.policies]
select = "published = 1 OR author_id = :uid"
insert = "author_id = :uid"
update = "author_id = :uid"
update_check = "author_id = :uid AND published IN (0, 1)"
delete = "author_id = :uid OR :app_metadata.role = 'editor'"

[tables.comments]
select = "anon"

[tables.projects]
select = "authenticated"

[tables.projects.policies]
select = "EXISTS (SELECT 1 FROM members m WHERE m.team_id = projects.team_id AND m.user_id = :uid)"
"""


class World:
    def __init__(self, app, anon, service, ids, tokens):
        self.app, self.anon, self.service, self.ids, self.tokens = app, anon, service, ids, tokens

    def get(self, who, path, **kwargs):
        return self.anon.get(path, token=self.tokens.get(who), **kwargs)

    def titles(self, who, query="select=title&order=id"):
        response = self.get(who, f"/rest/v1/posts?{query}")
        assert response.status_code in (200, 206), response.json
        return [row["title"] for row in response.json]


@pytest.fixture
def make_world(make_app, database_url, tmp_path, anon_key, service_key):
    engine = sa.create_engine(database_url)
    metadata.create_all(engine)

    def make(tables=TABLES):
        config = tmp_path / "tables.toml"
        config.write_text(tables)
        app = make_app(TABLES_CONFIG=str(config))
        anon, service = Api(app, anon_key), Api(app, service_key)
        ids, tokens = {}, {}
        for name in ("ann", "bob"):
            session = anon.sign_up(email=f"{name}@example.com")
            ids[name], tokens[name] = session["user"]["id"], session["access_token"]
        rows = [
            {"author_id": ids["ann"], "title": "ann published", "published": 1},
            {"author_id": ids["ann"], "title": "ann draft", "published": 0},
            {"author_id": ids["bob"], "title": "bob published", "published": 1},
            {"author_id": ids["bob"], "title": "bob draft", "published": 0},
        ]
        with engine.begin() as connection:
            connection.execute(posts.insert(), rows)
            connection.execute(comments.insert(), [{"post_id": n, "body": f"on {n}"} for n in (1, 2, 3, 4)])
            connection.execute(members.insert(), [{"team_id": 1, "user_id": ids["ann"]}])
            connection.execute(
                projects.insert(), [{"team_id": 1, "name": "team one"}, {"team_id": 2, "name": "team two"}]
            )
        return World(app, anon, service, ids, tokens)

    yield make
    engine.dispose()


@pytest.fixture
def world(make_world):
    return make_world()


def test_each_caller_reads_the_rows_its_policy_admits(world):
    assert world.titles(None) == ["ann published", "bob published"]
    assert world.titles("ann") == ["ann published", "ann draft", "bob published"]
    assert world.titles("bob") == ["ann published", "bob published", "bob draft"]
    everything = world.service.get("/rest/v1/posts?select=title&order=id").json
    assert len(everything) == 4  # the service_role key passes every policy


def test_a_hidden_row_is_no_row_for_counts_head_single_objects_and_csv(world):
    counted = world.get("ann", "/rest/v1/posts?select=id&limit=1", headers={"Prefer": "count=exact"})
    assert counted.status_code == 206 and counted.headers["Content-Range"] == "0-0/3"
    head = world.anon.head("/rest/v1/posts", headers={"Prefer": "count=exact"})
    assert head.headers["Content-Range"].endswith("/2")
    single = {"Accept": "application/vnd.pgrst.object+json"}
    assert_rest_error(world.get("bob", "/rest/v1/posts?title=eq.ann draft", headers=single), 406)
    assert world.get("ann", "/rest/v1/posts?title=eq.ann draft", headers=single).json["title"] == "ann draft"
    csv = world.get(None, "/rest/v1/posts?select=title&order=id", headers={"Accept": "text/csv"})
    assert csv.get_data(as_text=True) == 'title\n"ann published"\n"bob published"'
    # A filter naming the hidden row finds nothing, whatever it asks.
    assert world.titles("bob", "select=title&title=like.*draft*") == ["bob draft"]


def test_embeds_see_only_admitted_rows_at_every_depth(world):
    found = world.get(None, "/rest/v1/comments?select=id,posts(title)&order=id").json
    assert [row["posts"] for row in found] == [
        {"title": "ann published"},
        None,
        {"title": "bob published"},
        None,
    ]
    inner = world.get("ann", "/rest/v1/comments?select=id,posts!inner(title)&order=id").json
    assert [row["id"] for row in inner] == [1, 2, 3]
    nested = world.get(None, "/rest/v1/posts?select=title,comments(body)&order=id").json
    assert [row["title"] for row in nested] == ["ann published", "bob published"]


def test_updates_and_deletes_touch_only_the_rows_the_policy_admits(world):
    changed = world.anon.patch(
        "/rest/v1/posts?title=eq.ann draft", token=world.tokens["bob"], json={"published": 1}
    )
    assert changed.status_code == 204
    assert world.titles(None) == ["ann published", "bob published"]  # nothing happened to ann's draft
    removed = world.anon.delete("/rest/v1/posts?title=like.ann*", token=world.tokens["bob"])
    assert removed.status_code == 204
    assert world.titles("ann") == ["ann published", "ann draft", "bob published"]
    bob = world.tokens["bob"]
    world.anon.post("/rest/v1/posts", token=bob, json={"author_id": world.ids["bob"], "title": "bob new"})
    representation = {"Prefer": "return=representation"}
    mine = world.anon.delete("/rest/v1/posts?title=like.*new", token=bob, headers=representation)
    assert [row["title"] for row in mine.json] == ["bob new"]


def test_a_write_reaches_only_rows_the_select_policy_shows_so_it_counts_no_hidden_row(world):
    """As PostgreSQL applies a table's SELECT policies to an UPDATE or DELETE that reads rows: an
    editor, whose delete policy reaches every post, cannot delete nor count the drafts the select
    policy hides from them. Before, max-affected's refusal named how many hidden drafts a filter
    matched (nothing deleted), a way to read them letter by letter; and whether a hidden row was
    deleted depended on Prefer: return=."""
    world.service.put(f"/auth/v1/admin/users/{world.ids['bob']}", json={"app_metadata": {"role": "editor"}})
    editor = world.anon.sign_in("bob@example.com").json["access_token"]
    strict = {"Prefer": "handling=strict, max-affected=0"}
    probe = world.anon.delete("/rest/v1/posts?published=eq.0&title=like.ann*", token=editor, headers=strict)
    assert probe.status_code == 204, probe.json  # no row reached: no count to tell
    counted = world.anon.delete("/rest/v1/posts?published=eq.0&title=like.ann*", token=editor,
                                headers={"Prefer": "count=exact"})  # fmt: skip
    assert counted.status_code == 204 and counted.headers["Content-Range"] == "*/0"
    assert world.titles("ann") == ["ann published", "ann draft", "bob published"]
    fresh = {"author_id": world.ids["ann"], "title": "ann fresh", "published": 1}
    assert world.anon.post("/rest/v1/posts", token=world.tokens["ann"], json=fresh).status_code == 201
    published = world.anon.delete("/rest/v1/posts?title=eq.ann fresh", token=editor, headers=strict)
    assert published.status_code == 400  # one row it may read and delete: counted, and kept
    assert world.anon.delete("/rest/v1/posts?title=eq.ann fresh", token=editor).status_code == 204
    assert "ann fresh" not in world.titles("ann")


def test_a_row_an_update_takes_out_of_the_select_policy_is_not_read_back(make_world):
    """return=representation reads the changed rows back under the select policy, with or without
    embeds: a post its author unpublishes, where only published posts may be read, is changed and
    not returned."""
    world = make_world(
        TABLES.replace('select = "published = 1 OR author_id = :uid"', 'select = "published = 1"')
    )
    token, back = world.tokens["ann"], {"Prefer": "return=representation"}
    hidden = world.anon.patch("/rest/v1/posts?title=eq.ann published", token=token, headers=back,
                              json={"published": 0})  # fmt: skip
    assert hidden.status_code == 200 and hidden.json == []
    assert world.titles(None) == ["bob published"]  # changed all the same
    shown = world.anon.patch("/rest/v1/posts?title=eq.ann published", token=token, headers=back,
                             json={"published": 1})  # fmt: skip
    assert shown.json == []  # the select policy hides the draft it was: no row reached, as a read finds none
    assert world.titles(None) == ["bob published"]


def test_a_row_written_outside_the_policy_is_refused_and_nothing_is_kept(world):
    bob = world.ids["bob"]
    token = world.tokens["ann"]
    refused = world.anon.post("/rest/v1/posts", token=token, json={"author_id": bob, "title": "forged"})
    body = assert_rest_error(refused, 403)
    assert body["message"] == 'new row violates row-level security policy for table "posts"'
    bulk = [{"author_id": world.ids["ann"], "title": "fine"}, {"author_id": bob, "title": "forged too"}]
    assert_rest_error(world.anon.post("/rest/v1/posts", token=token, json=bulk), 403)
    assert world.titles("ann") == ["ann published", "ann draft", "bob published"]  # not even "fine"
    sdk = world.anon.post(
        "/rest/v1/posts",
        token=token,
        json={"author_id": bob, "title": "forged"},
        headers={"X-Client-Info": "supabase-py/2"},
    )
    assert sdk.status_code == 403 and sdk.json["code"] == "42501"


def test_an_upsert_meeting_a_row_it_may_not_touch_says_only_what_a_policy_refusal_says(world):
    token, ann = world.tokens["ann"], world.ids["ann"]
    merge = {"Prefer": "resolution=merge-duplicates"}
    upsert = {"author_id": ann, "title": "bob draft", "published": 0}
    refused = world.anon.post("/rest/v1/posts?on_conflict=title", token=token, json=upsert, headers=merge)
    body = assert_rest_error(refused, 403)
    assert body["message"] == 'new row violates row-level security policy for table "posts"'
    assert world.titles("bob") == ["ann published", "bob published", "bob draft"]  # untouched
    ignore = {"Prefer": "resolution=ignore-duplicates"}
    skipped = world.anon.post("/rest/v1/posts?on_conflict=title", token=token, json=upsert, headers=ignore)
    assert skipped.status_code == 201
    assert world.titles("bob") == ["ann published", "bob published", "bob draft"]
    # A plain insert that meets a hidden row's unique title is refused as in PostgreSQL: 409, the
    # key named by the value the client sent, nothing else of the hidden row in the answer.
    duplicate = world.anon.post("/rest/v1/posts", token=token, json=upsert)
    body = assert_rest_error(duplicate, 409)
    assert body["details"] == "Key (title)=(bob draft) already exists."
    assert str(world.ids["bob"]) not in str(body) and "published" not in str(body)


def test_update_check_holds_the_new_values(world):
    token = world.tokens["ann"]
    out_of_range = world.anon.patch("/rest/v1/posts?title=eq.ann draft", token=token, json={"published": 5})
    assert_rest_error(out_of_range, 403)
    given_away = world.anon.patch(
        "/rest/v1/posts?title=eq.ann draft", token=token, json={"author_id": world.ids["bob"]}
    )
    assert_rest_error(given_away, 403)
    assert world.titles("ann") == ["ann published", "ann draft", "bob published"]
    published = world.anon.patch("/rest/v1/posts?title=eq.ann draft", token=token, json={"published": 1})
    assert published.status_code == 204
    assert "ann draft" in world.titles("bob")


def test_app_metadata_set_by_an_administrator_is_a_parameter(world):
    fresh = {"author_id": world.ids["ann"], "title": "ann fresh", "published": 1}
    assert world.anon.post("/rest/v1/posts", token=world.tokens["ann"], json=fresh).status_code == 201
    token = world.tokens["bob"]
    assert world.anon.delete("/rest/v1/posts?title=eq.ann fresh", token=token).status_code == 204
    assert "ann fresh" in world.titles(None)  # bob is no editor yet
    world.service.put(f"/auth/v1/admin/users/{world.ids['bob']}", json={"app_metadata": {"role": "editor"}})
    token = world.anon.sign_in("bob@example.com").json["access_token"]
    assert world.anon.delete("/rest/v1/posts?title=eq.ann fresh", token=token).status_code == 204
    assert "ann fresh" not in world.titles(None)


def test_an_app_metadata_key_the_caller_lacks_is_null_in_a_read_s_plan(make_world):
    tables = TABLES.replace(
        '[tables.comments]\nselect = "anon"\n',
        '[tables.comments]\nselect = "anon"\n'
        "[tables.comments.policies]\nselect = \":app_metadata.role = 'editor'\"\n",
    )
    world = make_world(tables)
    assert world.get("ann", "/rest/v1/comments?select=id").json == []  # no role: NULL, no row
    world.service.put(f"/auth/v1/admin/users/{world.ids['ann']}", json={"app_metadata": {"role": "editor"}})
    token = world.anon.sign_in("ann@example.com").json["access_token"]
    assert len(world.anon.get("/rest/v1/comments?select=id", token=token).json) == 4
    assert world.get("bob", "/rest/v1/comments?select=id").json == []  # the same plan, bob's NULL


def test_a_membership_policy_shows_a_team_its_projects(world):
    ann = world.get("ann", "/rest/v1/projects?select=name").json
    assert ann == [{"name": "team one"}]
    assert world.get("bob", "/rest/v1/projects?select=name").json == []


def test_two_users_alternating_one_query_shape_never_see_each_other_s_rows(world):
    """The prepared plan is shared by every caller of the shape; the policy's parameters are bound
    per request."""
    expected = {
        "ann": ["ann published", "ann draft", "bob published"],
        "bob": ["ann published", "bob published", "bob draft"],
        None: ["ann published", "bob published"],
    }
    for _ in range(25):
        for who, titles in expected.items():
            assert world.titles(who) == titles
            assert world.titles(who, "select=title&order=id&id=gt.0") == titles


@pytest.mark.parametrize(
    "written, says",
    [
        ("published = 1 OR auhtor_id = :uid", "[tables.posts.policies]: select does not compile"),
        ("published = = 1", "[tables.posts.policies]: select does not compile"),
        ("author_id = :user", "select uses :user"),
    ],
)
def test_a_policy_the_database_cannot_compile_stops_the_start(make_world, written, says):
    broken = TABLES.replace("published = 1 OR author_id = :uid", written)
    with pytest.raises(ConfigError) as refused:
        make_world(broken)
    assert says in str(refused.value)


@pytest.mark.parametrize("concat", ["CONCAT(:uid, '/%')", ":uid || '/%'"], ids=["concat", "pipes"])
def test_a_folder_per_user_in_each_database_s_own_sql(make_world, backend, concat):
    """String concatenation is CONCAT() on MySQL/MariaDB and || on SQLite (on MySQL, || is OR): the
    policy is written for the database in use, as the docs show."""
    tables = (
        TABLES
        + f"""
[tables.attachments]
select = "authenticated"
insert = "authenticated"
[tables.attachments.policies]
select = "path LIKE {concat}"
insert = "path LIKE {concat}"
"""
    )
    if (backend == "mysql") != concat.startswith("CONCAT"):
        pytest.skip("the other database's spelling (on MySQL, || means OR)")
    world = make_world(tables)
    ann, bob = world.ids["ann"], world.ids["bob"]
    token = world.tokens["ann"]
    assert (
        world.anon.post("/rest/v1/attachments", token=token, json={"path": f"{ann}/cv.pdf"}).status_code
        == 201
    )
    refused = world.anon.post("/rest/v1/attachments", token=token, json={"path": f"{bob}/cv.pdf"})
    assert_rest_error(refused, 403)
    world.service.post("/rest/v1/attachments", json={"path": f"{bob}/notes.txt"})
    assert world.get("ann", "/rest/v1/attachments?select=path").json == [{"path": f"{ann}/cv.pdf"}]


def test_the_python_sdk_reads_through_the_policy(world):
    postgrest = pytest.importorskip("postgrest")
    base, stop = serve_app(world.app)
    try:
        headers = {"apikey": world.anon.key, "Authorization": f"Bearer {world.tokens['ann']}"}
        with postgrest.SyncPostgrestClient(f"{base}/rest/v1", headers=headers) as client:
            found = client.from_("posts").select("title").order("id").execute()
            assert [row["title"] for row in found.data] == ["ann published", "ann draft", "bob published"]
            with pytest.raises(postgrest.APIError) as refused:
                client.from_("posts").insert({"author_id": world.ids["bob"], "title": "x"}).execute()
            assert refused.value.code == "42501"
        plain = requests.get(
            f"{base}/rest/v1/posts?select=title", headers={"apikey": world.anon.key}, timeout=10
        )
        assert len(plain.json()) == 2
    finally:
        stop()
