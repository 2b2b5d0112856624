"""functions-js's own jest specs (hello, params, errors, timeout, hijack) against minibase:
`python tools/functions_js_suite.py [CHECKOUT]`, where CHECKOUT is a clone of
github.com/supabase/supabase-js at the tag tests/js/package.json pins (v2.109.0); without one, that
tag's source is downloaded from GitHub once into tests/js/functions-js/.source/.

The specs run unchanged. What they ran against is replaced: test/relay/container.ts (a Docker
container with Deno's relay) by tests/js/functions-js/relay.ts, which starts `python wsgi.py` with
the spec's JWT secret and tests/edge/functions (the four test functions in Python) for each spec
file; jest's config by tests/js/functions-js/jest.config.js, which maps nanoid to ids of 40
characters (the specs' secret is nanoid(10), and minibase refuses one under 32). Their node
packages are tests/js/functions-js/package-lock.json's, installed with npm ci."""

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools import supabase_js  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "js" / "functions-js"
PACKAGE = Path("packages") / "core" / "functions-js"
SPECS = ("hello", "params", "errors", "timeout", "hijack")


def source(checkout=None):
    """The supabase-js source: `checkout`, or the tag's archive, downloaded once."""
    return supabase_js.source(SUITE, PACKAGE, checkout)


def prepare(checkout):
    """The package copied under tests/js/functions-js/.work (its node_modules found up the tree), its
    relay replaced by minibase, jest configured."""
    work = SUITE / ".work"  # hidden: the docs' link checks walk the project
    shutil.rmtree(work, ignore_errors=True)
    package = work / PACKAGE
    shutil.copytree(checkout / PACKAGE, package, ignore=shutil.ignore_patterns("node_modules", "dist"))
    shutil.copy(checkout / "tsconfig.base.json", work / "tsconfig.base.json")
    shutil.copy(SUITE / "relay.ts", package / "test" / "relay" / "container.ts")
    shutil.copy(SUITE / "nanoid.ts", package / "test" / "relay" / "nanoid.ts")
    (package / "jest.config.ts").unlink(missing_ok=True)
    shutil.copy(SUITE / "jest.config.js", package / "jest.config.js")
    return package


def run(checkout=None):
    """Run the specs; jest's JSON report."""
    supabase_js.install(SUITE)
    package = prepare(source(checkout))
    env = {
        **os.environ,
        "MINIBASE_ROOT": str(ROOT),
        "MINIBASE_PYTHON": sys.executable,
        "MINIBASE_FUNCTIONS": str(ROOT / "tests" / "edge" / "functions"),
    }
    return supabase_js.jest(SUITE, package, [f"test/spec/{name}.spec.ts" for name in SPECS], env)


failures = supabase_js.failures


def main(checkout=None):
    results = run(checkout)
    print(f"{results['numFailedTests']} of {results['numTotalTests']} failed "
          f"({results['numPassedTests']} passed, {results['numPendingTests']} skipped)")  # fmt: skip
    for failure in failures(results):
        print(f"  FAILED {failure}")
    return results


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
