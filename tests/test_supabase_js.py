"""supabase-js 2.109 (the official JavaScript SDK) under node against minibase over a real waitress
server, on both databases. Skipped where node and npm are not installed."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from support import serve_app

JS = Path(__file__).resolve().parent / "js"
TABLES = """
[tables.notes]
select = "owner"
insert = "owner"
owner_column = "user_id"

[tables.tags]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"
"""

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None, reason="node and npm are not installed"
)


@pytest.fixture(scope="session")
def node_modules():
    """supabase-js as package-lock.json pins it, installed once per run."""
    if not (JS / "node_modules" / "@supabase" / "supabase-js").exists():
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return JS / "node_modules"


@pytest.fixture
def server(make_app, database_url, backend, tmp_path):
    auto = "AUTO_INCREMENT" if backend == "mysql" else "AUTOINCREMENT"
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                f"CREATE TABLE notes (id INTEGER PRIMARY KEY {auto}, user_id INTEGER NOT NULL, body TEXT)"
            )
        )
        connection.execute(
            sa.text(
                f"CREATE TABLE tags (id INTEGER PRIMARY KEY {auto}, name VARCHAR(50) NOT NULL UNIQUE, "
                "uses INTEGER)"
            )
        )
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    base, stop = serve_app(make_app(TABLES_CONFIG=str(config)))
    yield base
    stop()


def test_supabase_js_as_an_app_uses_it(node_modules, server, anon_key, service_key):
    env = {**os.environ, "MINIBASE_URL": server, "ANON_KEY": anon_key, "SERVICE_KEY": service_key}
    done = subprocess.run(["node", "sdk.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["weak"] == "weak_password" and out["wrong"] == "invalid_credentials"
    assert out["userId"] == "1" and out["updated"] == "cat" and out["refreshed"]
    assert out["insertCount"] == 1 and out["ownerMatches"]
    assert out["duplicate"] == "23505" and out["single"] == "PGRST116" and out["maybe"] is None
    assert out["upsert"] == 3 and out["total"] == 2 and out["csv"].rstrip("\n") == "name\nblue\nred"
    assert out["deleted"] == 1
    assert out["listed"] == ["js@example.com"] and out["total_users"] == 1
    assert out["fetched"] == "js@example.com" and out["banned"] == "user_banned"
    assert {"SIGNED_IN", "USER_UPDATED", "TOKEN_REFRESHED", "SIGNED_OUT"} <= set(out["events"])
