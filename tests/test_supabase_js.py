"""supabase-js 2.109 (the official JavaScript SDK) under node against minibase over a real waitress
server, on both databases. Skipped where node and npm are not installed."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node") is not None and shutil.which("npm") is not None
pytestmark = pytest.mark.skipif(not NODE, reason="node and npm are not installed")


def test_supabase_js_as_an_app_uses_it(node_modules, sdk_server, anon_key, service_key):
    env = {**os.environ, "MINIBASE_URL": sdk_server, "ANON_KEY": anon_key, "SERVICE_KEY": service_key}
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
    assert out["linkType"] == "magiclink" and out["verified"] == "js@example.com"
    assert {"SIGNED_IN", "USER_UPDATED", "TOKEN_REFRESHED", "SIGNED_OUT"} <= set(out["events"])
    assert out["qr"] == "data:image/svg+xml;utf-8,<svg " and out["mfaError"] is None
    assert out["level"] == ["aal2", "aal2"] and out["methods"] == ["totp", "password"]
    assert out["totpFactors"] == [True] and out["refreshedLevel"] == "aal2"
    assert out["secondLevel"] == ["aal1", "aal2"] and out["aal1Unenroll"] == "insufficient_aal"
    assert out["replay"] == "mfa_verification_failed" and out["unenrolled"]
