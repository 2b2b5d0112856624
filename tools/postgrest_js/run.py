"""postgrest-js's own integration tests against minibase, with the settings the README gives
postgrest-js: `python tools/postgrest_js/run.py SOURCE [--work DIR] [--database-url URL]`.

SOURCE is postgrest-js's package directory (`packages/core/postgrest-js` of supabase/supabase-js
at the tag of the postgrest-js the SDK tests pin, v2.109.0). Its tests run unchanged under jest
(ts-jest, type checks off: they are the SDK's, not the wire's) against minibase serving
schema.sql's copy of their database and tables.toml on 127.0.0.1:54321, where they expect
PostgREST behind Supabase's gateway. The one thing added is the anon key as `apikey` on every
request, as an app's client sends it (the tests' own gateway lets them in without one). The
server runs with DB_AGGREGATES_ENABLED=true and DB_TX_END=commit-allow-override, as the tests'
PostgREST does, and REST_ERROR_CODES=postgrest, as the README says for postgrest-js used alone.

Prints each test's outcome and the total, and writes them to WORK/results.json."""

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import jwt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PORT = 54321
SECRET = "postgrest-js-against-minibase-" + "x" * 16
PACKAGES = {  # jest and what the tests import, pinned
    "jest": "29.7.0",
    "ts-jest": "29.2.5",
    "typescript": "5.6.3",
    "@types/jest": "29.5.14",
    "@types/node": "20.17.6",
    "@jest/types": "29.6.3",
    "type-fest": "4.26.1",
    "zod": "3.25.76",
    "tslib": "2.8.1",
}
JEST_CONFIG = """module.exports = {
  rootDir: 'pkg',
  testEnvironment: 'node',
  maxWorkers: 1,
  testSequencer: '<rootDir>/test/testSequencer.js',
  testTimeout: 30000,
  setupFiles: ['<rootDir>/../apikey.js'],
  transform: { '^.+\\\\.tsx?$': ['ts-jest', { tsconfig: '<rootDir>/../tsconfig.json', diagnostics: false,
    isolatedModules: true }] },
}
"""
TSCONFIG = {
    "compilerOptions": {
        "module": "CommonJS", "target": "ES2022", "esModuleInterop": True, "strict": False,
        "skipLibCheck": True, "isolatedModules": True, "resolveJsonModule": True,
    }
}  # fmt: skip
APIKEY = """// The anon key on every request to minibase, as an app's client sends it.
const original = globalThis.fetch
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers || (input instanceof Request ? input.headers : undefined))
  if (!headers.has('apikey')) headers.set('apikey', process.env.ANON_KEY)
  return original(input, { ...init, headers })
}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="postgrest-js's package directory (src/ and test/)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "postgrest-js-run")
    parser.add_argument("--minibase", type=Path, default=ROOT, help="the checkout to serve (this one)")
    args = parser.parse_args()
    work = args.work.resolve()
    prepare(args.source.resolve(), work)
    database = work / "minibase.db"
    database.unlink(missing_ok=True)
    with sqlite3.connect(database) as connection:
        connection.executescript((HERE / "schema.sql").read_text())
    anon = jwt.encode({"role": "anon", "iss": "minibase", "iat": int(time.time())}, SECRET, algorithm="HS256")
    server = serve(database, work, args.minibase.resolve())
    try:
        env = {**os.environ, "ANON_KEY": anon}
        out = work / "results.json"
        subprocess.run(
            ["npx", "jest", "--ci", "--json", f"--outputFile={out}"],
            cwd=work, env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=20)
    report(json.loads(out.read_text()))


def prepare(source, work):
    """WORK with jest and the tests' imports installed (once), and a fresh copy of SOURCE's src/
    and test/ under WORK/pkg."""
    work.mkdir(parents=True, exist_ok=True)
    package = {"name": "postgrest-js-against-minibase", "private": True, "devDependencies": PACKAGES}
    (work / "package.json").write_text(json.dumps(package, indent=2))
    if not (work / "node_modules" / "ts-jest").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=work, check=True, timeout=900)
    shutil.rmtree(work / "pkg", ignore_errors=True)
    for part in ("src", "test"):
        shutil.copytree(source / part, work / "pkg" / part)
    (work / "jest.config.js").write_text(JEST_CONFIG)
    (work / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    (work / "apikey.js").write_text(APIKEY)


def serve(database, work, root):
    """minibase as `python wsgi.py` runs it, over the database, on PORT; once it answers."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "TABLES_CONFIG": str(HERE / "tables.toml"),
        "HOST": "127.0.0.1",
        "PORT": str(PORT),
        "JWT_SECRET": SECRET,
        "USERS_TABLE": "auth_users",  # the tests have a `users` table of their own
        "DB_AGGREGATES_ENABLED": "true",
        "DB_TX_END": "commit-allow-override",
        "REST_ERROR_CODES": "postgrest",
        "RATE_LIMITS": "off",
    }
    log = (work / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "wsgi.py"], cwd=root, env=env, stdout=log, stderr=log)
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1):
                return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"minibase did not start: see {work / 'server.log'}")


def report(results):
    """Each test's file, name, outcome and the first line of its failure; the totals."""
    passed = total = 0
    for suite in sorted(results["testResults"], key=lambda suite: suite["name"]):
        name = Path(suite["name"]).name
        if not suite["assertionResults"]:
            print(f"{name}: did not run: {suite.get('message', '').strip().splitlines()[:1]}")
        for test in suite["assertionResults"]:
            total += 1
            passed += test["status"] == "passed"
            why = ""
            if test["status"] == "failed":
                lines = [line for line in "\n".join(test["failureMessages"]).splitlines() if line.strip()]
                why = " | " + " / ".join(line.strip() for line in lines[:3])[:300]
            print(f"{test['status']:7} {name} :: {test['fullName']}{why}")
    print(f"\n{passed} of {total} passed")


if __name__ == "__main__":
    main()
