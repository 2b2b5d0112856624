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

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "js" / "functions-js"
TAG = "v2.109.0"
ARCHIVE = f"https://codeload.github.com/supabase/supabase-js/tar.gz/refs/tags/{TAG}"
PACKAGE = Path("packages") / "core" / "functions-js"
SPECS = ("hello", "params", "errors", "timeout", "hijack")


def source(checkout=None):
    """The supabase-js source: `checkout`, or the tag's archive, downloaded once."""
    if checkout:
        return Path(checkout)
    kept = SUITE / ".source" / TAG  # hidden: the docs' link checks walk the project
    if not (kept / PACKAGE / "package.json").exists():
        with urllib.request.urlopen(ARCHIVE, timeout=120) as answer:  # noqa: S310 - a fixed https URL
            data = answer.read()
        wanted = ("packages/core/functions-js/", "tsconfig.base.json")
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            members = []
            for member in archive.getmembers():
                inner = member.name.partition("/")[2]
                if inner.startswith(wanted) and ".." not in inner and (member.isfile() or member.isdir()):
                    member.name = inner
                    members.append(member)
            archive.extractall(kept, members=members, filter="data")
    return kept


def install():
    """The suite's node packages, as tests/js/functions-js/package-lock.json pins them."""
    if not (SUITE / "node_modules" / ".bin" / "jest").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SUITE, check=True, capture_output=True,
                       timeout=600)  # fmt: skip


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
    install()
    package = prepare(source(checkout))
    report = package / "jest.json"
    env = {
        **os.environ,
        "MINIBASE_ROOT": str(ROOT),
        "MINIBASE_PYTHON": sys.executable,
        "MINIBASE_FUNCTIONS": str(ROOT / "tests" / "edge" / "functions"),
    }
    jest = str(SUITE / "node_modules" / ".bin" / "jest")
    specs = [f"test/spec/{name}.spec.ts" for name in SPECS]
    command = [jest, "--runInBand", "--json", f"--outputFile={report}", *specs]
    done = subprocess.run(command, cwd=package, env=env, capture_output=True, text=True, timeout=900)
    if not report.exists():
        raise RuntimeError(f"jest wrote no report:\n{done.stderr[-3000:]}")
    return json.loads(report.read_text())


def failures(results):
    return [
        f"{test['fullName']}: {' '.join(test['failureMessages'])[:600]}"
        for suite in results["testResults"]
        for test in suite["assertionResults"]
        if test["status"] == "failed"
    ] + [suite["message"][:1000] for suite in results["testResults"] if suite.get("status") == "failed"
         and not suite["assertionResults"]]  # fmt: skip


def main(checkout=None):
    results = run(checkout)
    print(f"{results['numFailedTests']} of {results['numTotalTests']} failed "
          f"({results['numPassedTests']} passed, {results['numPendingTests']} skipped)")  # fmt: skip
    for failure in failures(results):
        print(f"  FAILED {failure}")
    return results


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
