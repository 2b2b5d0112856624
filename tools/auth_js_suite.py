"""auth-js's own specs against minibase: test/passkey.e2e.test.ts whole, and the `WebAuthn MFA` and
`signInAnonymously` blocks of test/GoTrueClient.test.ts, by `python tools/auth_js_suite.py [--all]
[CHECKOUT]` (with --all, every spec file the Supabase CLI's jest config runs), where CHECKOUT is a
clone of github.com/supabase/supabase-js at the tag tests/js/package.json pins (v2.109.0); without
one, that tag's source is downloaded from GitHub once into tests/js/auth-js/.source/.

The spec files and their helpers (test/lib/, the software authenticator) run unchanged. What they
ran against is replaced: the Supabase CLI's auth (test/supabase/config.toml) by `python wsgi.py`
set up as that file's [auth] sections are (RP id `localhost`, origin http://localhost:5173,
passkeys, WebAuthn MFA and anonymous sign-ins on, manual linking off), signing with the RSA key the
suite's own test/generate-signing-keys.js makes, as the CLI does; it listens on a free port, and
tests/js/auth-js/cli-url.js, run by jest before each spec file, sends the specs' requests for the
CLI's http://127.0.0.1:54321/auth/v1 there. jest's config is tests/js/auth-js/jest.config.js, its
packages tests/js/auth-js/package-lock.json's, installed with npm ci."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools import supabase_js  # noqa: E402
from tools.servers import free_port, spawn, stop, wait_until_up  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "js" / "auth-js"
PACKAGE = Path("packages") / "core" / "auth-js"
SPECS = ("test/passkey.e2e.test.ts", "test/GoTrueClient.test.ts")
# jest's -t: the passkey file's one describe block, and GoTrueClient.test.ts's WebAuthn MFA and
# anonymous sign-in blocks.
BLOCKS = "^(Passkey end-to-end|WebAuthn MFA|signInAnonymously) "
# What `--all` leaves out: docker-tests/ want other servers, as auth-js's jest.config.cli.js says;
# fetch.test.ts tests the SDK's fetch wrapper against a mock server of its own, not a server.
EVERYTHING_BUT = ("/node_modules/", "/example/", "/docker-tests/", "/test/fetch.test.ts")
# test/supabase/config.toml's [auth] and [auth.*] sections, in minibase's (GoTrue's) setting names.
CLI_SETTINGS = {
    "JWT_SECRET": "super-secret-jwt-token-with-at-least-32-characters-long",
    "SITE_URL": "http://127.0.0.1:3000",
    "REDIRECT_ALLOW_LIST": "https://127.0.0.1:3000,http://localhost:5173",
    "JWT_EXPIRY": "3600",
    "REFRESH_TOKEN_REUSE_INTERVAL": "10",
    "MAILER_AUTOCONFIRM": "true",
    "ANONYMOUS_USERS_ENABLED": "true",
    "SECURITY_MANUAL_LINKING_ENABLED": "false",
    "MFA_WEB_AUTHN_ENROLL_ENABLED": "true",
    "MFA_WEB_AUTHN_VERIFY_ENABLED": "true",
    "PASSKEY_ENABLED": "true",
    "WEBAUTHN_RP_DISPLAY_NAME": "auth-js tests",
    "WEBAUTHN_RP_ID": "localhost",
    "WEBAUTHN_RP_ORIGINS": "http://localhost:5173",
    "UUID_USER_IDS": "true",  # GoTrue's ids are UUIDs; auth-js's admin calls refuse any other id
    "RATE_LIMITS": "off",  # the CLI's limits are raised for tests; one run stays far below them
}


def source(checkout=None):
    """The supabase-js source: `checkout`, or the tag's archive, downloaded once."""
    return supabase_js.source(SUITE, PACKAGE, checkout)


def prepare(checkout):
    """The package copied under tests/js/auth-js/.work (its node_modules found up the tree), with a
    fresh signing key made by the suite's own generator, and jest configured."""
    work = SUITE / ".work"  # hidden: the docs' link checks walk the project
    shutil.rmtree(work, ignore_errors=True)
    package = work / PACKAGE
    ignored = shutil.ignore_patterns("node_modules", "dist", "coverage", "signing_keys.json")
    shutil.copytree(checkout / PACKAGE, package, ignore=ignored)
    shutil.copy(checkout / "tsconfig.base.json", work / "tsconfig.base.json")
    for name in ("jest.config.js", "cli-url.js"):
        shutil.copy(SUITE / name, package / name)
    subprocess.run(["node", "test/generate-signing-keys.js"], cwd=package, check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    return package


def start(package, workdir):
    """`python wsgi.py` as the CLI's auth is set up, on a free port: (process, its /auth/v1 URL)."""
    port = free_port()
    keys = json.loads((package / "test" / "supabase" / "signing_keys.json").read_text())
    env = {
        **os.environ,
        **CLI_SETTINGS,
        "JWT_SIGNING_KEYS": json.dumps(keys),
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{workdir}/minibase.db",
        "STORAGE_ROOT": str(workdir / "storage"),
        "BCRYPT_ROUNDS": "4",  # every test signs a user up; the cost is not what is tested
    }
    process = spawn([sys.executable, "wsgi.py"], workdir / "minibase.log", cwd=ROOT, env=env)
    try:
        wait_until_up(process, f"http://127.0.0.1:{port}/health", "minibase")
    except SystemExit:
        stop(process)
        said = (workdir / "minibase.log").read_text()[-3000:]
        raise RuntimeError(f"minibase did not start:\n{said}") from None
    return process, f"http://127.0.0.1:{port}/auth/v1"


def run(checkout=None, everything=False):
    """Run the specs (with `everything`, every spec file the CLI's jest config runs); jest's JSON report."""
    supabase_js.install(SUITE)
    package = prepare(source(checkout))
    workdir = Path(tempfile.mkdtemp(prefix="minibase-auth-js-"))
    process, url = start(package, workdir)
    try:
        chosen = ["--testPathIgnorePatterns", *EVERYTHING_BUT] if everything else ["-t", BLOCKS, *SPECS]
        return supabase_js.jest(SUITE, package, chosen, {**os.environ, "MINIBASE_AUTH_URL": url})
    finally:
        stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


failures = supabase_js.failures


def counts(results, by_file=False):
    """{block: (passed, run)} of the blocks BLOCKS selects (the rest of GoTrueClient.test.ts is
    skipped), or {spec file: (passed, run)}."""
    found = {}
    for suite in results["testResults"]:
        for test in suite["assertionResults"]:
            if test["status"] in ("passed", "failed"):
                block = (
                    suite["name"].partition(f"{PACKAGE.as_posix()}/")[2]
                    if by_file
                    else test["ancestorTitles"][0]
                )
                passed, ran = found.get(block, (0, 0))
                found[block] = (passed + (test["status"] == "passed"), ran + 1)
    return found


def main(arguments):
    """`[--all] [CHECKOUT]`: the passkey specs, or with --all every spec file the CLI's config runs."""
    everything = "--all" in arguments
    rest = [argument for argument in arguments if argument != "--all"]
    results = run(rest[0] if rest else None, everything)
    for block, (passed, ran) in sorted(counts(results, by_file=everything).items()):
        print(f"{block}: {passed} of {ran} passed")
    if everything:
        print(f"{results['numPassedTests']} of {results['numTotalTests']} passed")
    for failure in failures(results):
        print(f"  FAILED {failure}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
