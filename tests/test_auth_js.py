"""auth-js's own passkey and anonymous sign-in specs, unchanged, against minibase set up as the
Supabase CLI's auth the suite expects: test/passkey.e2e.test.ts, and GoTrueClient.test.ts's
`WebAuthn MFA` and `signInAnonymously` blocks, by
tools/auth_js_suite.py. The supabase-js source is AUTH_JS_CHECKOUT (a clone at v2.109.0; a
FUNCTIONS_JS_CHECKOUT serves too) or the tag's archive, downloaded once into
tests/js/auth-js/.source/."""

import os
import shutil

import pytest

from support import require
from tools import auth_js_suite

pytestmark = pytest.mark.slow  # node, jest, and a python wsgi.py
# Every test of the two blocks, by name: one that stops being selected (renamed, skipped) is seen.
EXPECTED = {"Passkey end-to-end": 13, "WebAuthn MFA": 8, "signInAnonymously": 2}


def test_auth_js_s_own_passkey_webauthn_mfa_and_anonymous_specs_pass_against_minibase():
    require(shutil.which("node") and shutil.which("npm"), "node and npm", "node 20 and npm")
    checkout = os.environ.get("AUTH_JS_CHECKOUT") or os.environ.get("FUNCTIONS_JS_CHECKOUT")
    try:
        auth_js_suite.source(checkout)
    except OSError as exc:  # no way to GitHub from here: say so, as a skip, not a red run
        pytest.skip(f"the supabase-js source could not be fetched ({exc}); set AUTH_JS_CHECKOUT")
    results = auth_js_suite.run(checkout)
    assert auth_js_suite.failures(results) == []
    assert auth_js_suite.counts(results) == {block: (ran, ran) for block, ran in EXPECTED.items()}
