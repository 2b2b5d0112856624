"""Supabase's new API keys (PUBLISHABLE_KEYS, SECRET_KEYS): anon and service_role on every API, in
`apikey` and as a bearer; a secret key from a browser refused; revoking by removing; through
supabase-js and supabase-py. On both databases."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from config import from_environment
from support import Api, assert_auth_error, serve_app, supabase_clients
from variables import ConfigError

JS = Path(__file__).resolve().parent / "js"
PUBLISHABLE = "sb_publishable_" + "P" * 31
SECRET_KEY = "sb_secret_" + "S" * 31
OTHER_SECRET = "sb_secret_" + "T" * 31
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
TABLES = """
[tables.notes]
select = "owner"
insert = "owner"
owner_column = "user_id"

[tables.tags]
select = "anon"
insert = "service_role"

[buckets.avatars]
public = false
select = "owner"
insert = "authenticated"
"""


@pytest.fixture
def make(make_app, database_url, tmp_path):
    with sa.create_engine(database_url).begin() as connection:
        connection.execute(sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER, body TEXT)"))
        connection.execute(sa.text("CREATE TABLE tags (id INTEGER PRIMARY KEY, name VARCHAR(20))"))
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)

    def build(publishable=None, secret=None):
        return make_app(
            TABLES_CONFIG=str(config),
            PUBLISHABLE_KEYS={"default": PUBLISHABLE} if publishable is None else publishable,
            SECRET_KEYS={"default": SECRET_KEY, "worker": OTHER_SECRET} if secret is None else secret,
        )

    return build


def test_the_publishable_key_is_anon_and_a_secret_key_is_service_role_on_every_api(make):
    app = make()
    public, admin = Api(app, PUBLISHABLE), Api(app, SECRET_KEY)
    token = public.sign_up()["access_token"]
    assert public.get("/rest/v1/tags").status_code == 200
    assert public.post("/rest/v1/tags", json={"id": 1, "name": "red"}).status_code in (401, 403)
    assert admin.post("/rest/v1/tags", json={"id": 1, "name": "red"}).status_code == 201
    assert public.get("/auth/v1/admin/users").status_code == 403
    assert admin.get("/auth/v1/admin/users").json["users"][0]["email"] == "ann@example.com"
    assert public.get("/storage/v1/bucket").json == []
    assert [bucket["id"] for bucket in admin.get("/storage/v1/bucket").json] == ["avatars"]
    assert Api(app, OTHER_SECRET).get("/auth/v1/admin/users").status_code == 200  # each listed key
    # The signed-in user with the publishable key, as an app sends them.
    assert public.get("/auth/v1/user", token=token).json["email"] == "ann@example.com"
    assert public.post("/rest/v1/notes", token=token, json={"id": 1, "body": "mine"}).status_code == 201
    assert public.get("/rest/v1/notes", token=token).json == [{"id": 1, "user_id": 1, "body": "mine"}]
    # As a bearer: the key's role (what the SDKs send before anyone signs in); never a user.
    assert public.get("/rest/v1/tags", token=SECRET_KEY).status_code == 200
    assert public.get("/auth/v1/admin/users", token=SECRET_KEY).status_code == 200
    assert public.get("/auth/v1/admin/users", token=PUBLISHABLE).status_code == 403
    assert_auth_error(public.get("/auth/v1/user", token=PUBLISHABLE), 401, "bad_jwt")
    assert_auth_error(public.get("/auth/v1/user", token=SECRET_KEY), 401, "bad_jwt")


@pytest.mark.parametrize(
    "key",
    [
        PUBLISHABLE[:-1],
        PUBLISHABLE + "x",
        SECRET_KEY.upper(),
        "sb_secret_" + "S" * 30 + "é",
        "sb_publishable_",
        "sb_",
    ],
)
def test_keys_that_are_not_listed_are_invalid(make, key):
    client = make().test_client()
    for path in ("/auth/v1/settings", "/rest/v1/tags", "/storage/v1/bucket"):
        response = client.get(path, headers={"apikey": key})
        assert response.status_code == 401 and response.json["message"] == "Invalid API key", path
    bearer = client.get("/rest/v1/tags", headers={"apikey": PUBLISHABLE, "Authorization": f"Bearer {key}"})
    assert bearer.status_code == 401


def test_revoking_a_key_is_removing_it_from_the_list(make):
    app = make(secret={"worker": OTHER_SECRET})
    assert Api(app, OTHER_SECRET).get("/auth/v1/admin/users").status_code == 200
    response = Api(app, SECRET_KEY).get("/auth/v1/admin/users")
    assert response.status_code == 401 and response.json["message"] == "Invalid API key"
    revoked = make(publishable={}, secret={})
    for key in (PUBLISHABLE, OTHER_SECRET):
        assert Api(revoked, key).get("/rest/v1/tags").status_code == 401


def test_a_secret_key_from_a_browser_is_refused_as_supabase_refuses_it(make):
    app = make()
    client = app.test_client()
    forbidden = {
        "message": "Forbidden use of secret API key in browser",
        "hint": "Secret API keys belong on servers; a browser app uses a publishable key.",
        "code": 401,
        "details": "",
    }
    for path in ("/auth/v1/admin/users", "/rest/v1/tags", "/storage/v1/bucket"):
        in_apikey = client.get(path, headers={"apikey": SECRET_KEY, "User-Agent": CHROME})
        assert in_apikey.status_code == 401 and in_apikey.json == forbidden, path
        as_bearer = client.get(
            path,
            headers={"apikey": PUBLISHABLE, "Authorization": f"Bearer {SECRET_KEY}", "User-Agent": CHROME},
        )
        assert as_bearer.status_code == 401 and as_bearer.json["message"] == forbidden["message"], path
        # The same key from a server, and the publishable key from the browser, pass.
        assert client.get(path, headers={"apikey": SECRET_KEY, "User-Agent": "node"}).status_code == 200
        assert client.get(path, headers={"apikey": SECRET_KEY}).status_code == 200
    assert (
        client.get("/rest/v1/tags", headers={"apikey": PUBLISHABLE, "User-Agent": CHROME}).status_code == 200
    )


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("PUBLISHABLE_KEYS", "not json", "must be a JSON object"),
        ("PUBLISHABLE_KEYS", '["sb_publishable_x"]', "must be a JSON object"),
        ("PUBLISHABLE_KEYS", json.dumps({"a": SECRET_KEY}), "must start with sb_publishable_"),
        ("SECRET_KEYS", json.dumps({"a": PUBLISHABLE}), "must start with sb_secret_"),
        ("SECRET_KEYS", json.dumps({"a": "sb_secret_short"}), "at least 20 characters"),
        ("SECRET_KEYS", json.dumps({"a": 42}), "must start with sb_secret_"),
        ("SECRET_KEYS", json.dumps({"a": "sb_secret_" + "x" * 25 + " y"}), "not printable ASCII"),
    ],
)
def test_a_key_list_that_cannot_work_stops_the_start(name, raw, message):
    with pytest.raises(ConfigError, match=message):
        from_environment({name: raw})


def test_listed_keys_parse_from_the_environment():
    settings = from_environment({"PUBLISHABLE_KEYS": json.dumps({"web": PUBLISHABLE})})
    assert settings["PUBLISHABLE_KEYS"] == {"web": PUBLISHABLE} and settings["SECRET_KEYS"] == {}


# --- the SDKs, as an app configured with the new keys uses them


@pytest.fixture
def served(make):
    base, stop = serve_app(make())
    yield base
    stop()


def test_supabase_js_with_a_publishable_key_and_a_secret_key(served, node_modules):
    env = {**os.environ, "MINIBASE_URL": served, "PUBLISHABLE_KEY": PUBLISHABLE, "SECRET_KEY": SECRET_KEY}
    done = subprocess.run(["node", "keys.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["signedUp"] == "js@example.com"
    assert out["inserted"] == [{"id": 1, "user_id": 1, "body": "from js"}] and out["read"] == [
        {"body": "from js"}
    ]
    assert out["anonWrite"] is not None and out["adminWrite"] == 201 and out["tags"] == [{"name": "red"}]
    assert out["users"] == ["js@example.com"]
    assert out["upload"] is None and out["download"] == "hello from js" and out["buckets"] == ["avatars"]


def test_supabase_py_with_a_publishable_key_and_a_secret_key(served):
    with supabase_clients(served) as connect:
        client, admin = connect(PUBLISHABLE), connect(SECRET_KEY)
        client.auth.sign_up({"email": "py@example.com", "password": "secret-pw"})
        client.table("notes").insert({"id": 1, "body": "from py"}).execute()
        assert [row["body"] for row in client.table("notes").select("*").execute().data] == ["from py"]
        admin.table("tags").insert({"id": 1, "name": "red"}).execute()
        assert client.table("tags").select("name").execute().data == [{"name": "red"}]
        assert admin.auth.admin.list_users()[0].email == "py@example.com"
        avatars = client.storage.from_("avatars")
        avatars.upload("py/hello.txt", b"hello", {"content-type": "text/plain"})
        assert avatars.download("py/hello.txt") == b"hello"
        assert [bucket.id for bucket in admin.storage.list_buckets()] == ["avatars"]


def test_the_cli_generates_keys_that_can_be_listed(make_app):
    runner = make_app().test_cli_runner()
    publishable = runner.invoke(args=["keys", "generate-api-key"]).output.strip()
    secret = runner.invoke(args=["keys", "generate-api-key", "--secret"]).output.strip()
    assert publishable.startswith("sb_publishable_") and secret.startswith("sb_secret_")
    settings = from_environment(
        {"PUBLISHABLE_KEYS": json.dumps({"web": publishable}), "SECRET_KEYS": json.dumps({"cron": secret})}
    )
    app = make_app(PUBLISHABLE_KEYS=settings["PUBLISHABLE_KEYS"], SECRET_KEYS=settings["SECRET_KEYS"])
    assert Api(app, publishable).get("/auth/v1/settings").status_code == 200
    assert Api(app, secret).get("/auth/v1/admin/users").status_code == 200
