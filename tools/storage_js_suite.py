"""storage-js's own jest suite against minibase: `python tools/storage_js_suite.py CHECKOUT`, where
CHECKOUT is a clone of github.com/supabase/supabase-js at the tag of the storage-js that
tests/js/package.json pins (v2.109.0). The suite expects the Supabase CLI's local project on
127.0.0.1:54321 with its JWT secret and seeded buckets; this starts minibase that way on a port of
its own, adds the `apikey` header supabase-js sends (the tests pass only `Authorization`), runs
the files that reach the server or read its errors, and prints the failures."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.servers import LOGS, ROOT, free_port, spawn, stop, wait_until_up  # noqa: E402

# The Supabase CLI's default secret: the suite's service_role key is signed with it.
CLI_SECRET = "super-secret-jwt-token-with-at-least-32-characters-long"
SEEDED_BUCKETS = ("bucket2", "bucket3", "bucket4", "bucket5", "bucket-move", "my-private-bucket")
FILES = (
    "storageApi",
    "storageFileApi",
    "storageFileApiNode",
    "storageBucketApi",
    "storageFileApiErrorHandling",
)
# The versions the monorepo's pnpm catalog names, pinned.
DEV = {"@types/jest": "30.0.0", "@types/node": "20.19.9", "jest": "30.4.2", "ts-jest": "29.4.9",
       "typescript": "5.8.3"}  # fmt: skip


def prepare(checkout, workdir, port):
    """A copy of the package with jest installed, its tests pointed at `port` and sending apikey."""
    package = workdir / "packages" / "core" / "storage-js"
    shutil.copytree(Path(checkout) / "packages" / "core" / "storage-js", package)
    shutil.copy(Path(checkout) / "tsconfig.base.json", workdir / "tsconfig.base.json")
    manifest = json.loads((package / "package.json").read_text())
    manifest.pop("scripts", None)
    manifest["devDependencies"] = DEV
    manifest["dependencies"] = {"iceberg-js": "0.8.1", "tslib": "2.8.1"}
    (package / "package.json").write_text(json.dumps(manifest, indent=1))
    for test in (package / "test").glob("*.ts"):
        text = test.read_text().replace("127.0.0.1:54321", f"127.0.0.1:{port}")
        text = re.sub(
            r"\{ Authorization: `Bearer \$\{KEY\}`", "{ apikey: KEY, Authorization: `Bearer ${KEY}`", text
        )
        test.write_text(text)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund"], cwd=package, check=True, capture_output=True
    )
    return package


def start(workdir, port):
    (workdir / "tables.toml").write_text("".join(f"[buckets.{name}]\n" for name in SEEDED_BUCKETS))
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir}/minibase.db",
        "JWT_SECRET": CLI_SECRET,
        "RATE_LIMITS": "off",
        "PORT": str(port),
        "TABLES_CONFIG": str(workdir / "tables.toml"),
        "STORAGE_ROOT": str(workdir / "storage"),
    }
    process = spawn([sys.executable, "wsgi.py"], LOGS / "storage-js-suite.log", cwd=ROOT, env=env)
    return wait_until_up(process, f"http://127.0.0.1:{port}/health", "minibase")


def main(checkout):
    LOGS.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="minibase-storage-js-"))
    port = free_port()
    package = prepare(checkout, workdir, port)
    process = start(workdir, port)
    try:
        report = workdir / "jest.json"
        tests = [f"test/{name}.test.ts" for name in FILES]
        command = [
            "npx",
            "jest",
            "--runInBand",
            "--coverage=false",
            "--json",
            f"--outputFile={report}",
            *tests,
        ]
        subprocess.run(command, cwd=package, capture_output=True)
        results = json.loads(report.read_text())
    finally:
        stop(process)
    print(f"{results['numFailedTests']} of {results['numTotalTests']} failed "
          f"({results['numPassedTests']} passed, {results['numPendingTests']} skipped)")  # fmt: skip
    for suite in results["testResults"]:
        for test in suite["assertionResults"]:
            if test["status"] == "failed":
                print(f"  FAILED {test['fullName']}")
    shutil.rmtree(workdir, ignore_errors=True)
    return results


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
