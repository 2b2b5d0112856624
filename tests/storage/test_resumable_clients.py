"""Resumable uploads with the clients apps use: tus-js-client under node (tests/js/resumable.mjs)
against a real waitress server, as Supabase's docs write it (6 MB chunks, data with the creation),
and resuming after the connection is cut mid-upload. SQLite only: the protocol is the client's
concern here, the databases are test_resumable.py's."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import serve_app

JS = Path(__file__).resolve().parents[1] / "js"

FILES = """
[buckets.files]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"
"""


@pytest.fixture
def backend():
    return "sqlite"


@pytest.fixture
def server(make_app, tmp_path):
    config = tmp_path / "tables.toml"
    config.write_text(FILES)
    base, stop = serve_app(make_app(TABLES_CONFIG=str(config), STORAGE_ROOT=str(tmp_path / "storage")))
    yield base
    stop()


def test_tus_js_client_uploads_and_resumes(node_modules, server, anon_key, tmp_path):
    env = {**os.environ, "MINIBASE_URL": server, "ANON_KEY": anon_key}
    done = subprocess.run(
        ["node", "resumable.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    big = out["big"]
    assert big["status"] == 200 and big["same"] and big["cache"] == "max-age=3600"
    assert big["requests"] == ["POST 201", "PATCH 204"], big  # 6 MB with the creation, then the rest
    resumed = out["resumed"]
    assert resumed["cut"] and resumed["same"] and resumed["size"] == 1024 * 1024
    # After the cut the client asked where the upload stood, and went on from there, not from 0.
    assert len(resumed["heads"]) == 1 and 0 < resumed["heads"][0] < 1024 * 1024, resumed
    assert resumed["heads"][0] % (64 * 1024) == 0
    assert resumed["patches"] < 1024 * 1024 // (64 * 1024) + 3
    assert out["takeover"] == 404
    assert [p for p in (tmp_path / "storage" / "uploads").rglob("*") if p.is_file()] == []
