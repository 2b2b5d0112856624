"""functions-js's own specs (hello, params, errors, timeout, hijack), unchanged, against minibase with
their four test functions written in Python (tests/edge/functions): tools/functions_js_suite.py.
The supabase-js source is FUNCTIONS_JS_CHECKOUT (a clone at v2.109.0) or the tag's archive,
downloaded once into tests/js/functions-js/.source/."""

import os
import shutil

import pytest

from support import require
from tools import functions_js_suite

pytestmark = pytest.mark.slow  # node, jest, and a python wsgi.py per spec file
# Two specs want `data.body` to equal the ArrayBuffer sent, where the mirror answers
# application/octet-stream, which functions-js hands back as a Blob (no `url`, no `body`): no
# function can answer both. Named here, so that any other failure, or these passing, is seen.
CANNOT_PASS = {
    "params reached to function invoke mirror with body arrayBuffer",
    "params reached to function invoke mirror with body blob",
}


def test_functions_js_s_own_specs_pass_against_minibase():
    require(shutil.which("node") and shutil.which("npm"), "node and npm", "node 20 and npm")
    checkout = os.environ.get("FUNCTIONS_JS_CHECKOUT")
    try:
        functions_js_suite.source(checkout)
    except OSError as exc:  # no way to GitHub from here: say so, as a skip, not a red run
        pytest.skip(f"the supabase-js source could not be fetched ({exc}); set FUNCTIONS_JS_CHECKOUT")
    results = functions_js_suite.run(checkout)
    assert results["numTotalTests"] >= 35 and results["numPassedTests"] >= 35
    failed = {failure.partition(": ")[0] for failure in functions_js_suite.failures(results)}
    assert failed == CANNOT_PASS
