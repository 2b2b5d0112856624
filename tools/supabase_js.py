"""What the runners of supabase-js's own jest suites share (tools/auth_js_suite.py,
tools/functions_js_suite.py): the source at the tag tests/js/package.json pins, each suite's node
packages, jest run for its JSON report, and the failures in that report."""

import io
import json
import subprocess
import tarfile
import urllib.request
from pathlib import Path

TAG = "v2.109.0"
ARCHIVE = f"https://codeload.github.com/supabase/supabase-js/tar.gz/refs/tags/{TAG}"


def source(suite, package, checkout=None):
    """The supabase-js source: `checkout`, or the tag's archive, downloaded once into the `suite`
    folder (only `package` and tsconfig.base.json of it)."""
    if checkout:
        return Path(checkout)
    kept = suite / ".source" / TAG  # hidden: the docs' link checks walk the project
    if not (kept / package / "package.json").exists():
        with urllib.request.urlopen(ARCHIVE, timeout=120) as answer:  # noqa: S310 - a fixed https URL
            data = answer.read()
        wanted = (f"{package.as_posix()}/", "tsconfig.base.json")
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            members = []
            for member in archive.getmembers():
                inner = member.name.partition("/")[2]
                if inner.startswith(wanted) and ".." not in inner and (member.isfile() or member.isdir()):
                    member.name = inner
                    members.append(member)
            archive.extractall(kept, members=members, filter="data")
    return kept


def install(suite):
    """The `suite` folder's node packages, as its package-lock.json pins them."""
    if not (suite / "node_modules" / ".bin" / "jest").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=suite, check=True, capture_output=True,
                       timeout=600)  # fmt: skip


def jest(suite, package, arguments, env):
    """jest of `suite` run in the prepared `package` folder with `arguments`; its JSON report."""
    report = package / "jest.json"
    command = [str(suite / "node_modules" / ".bin" / "jest"), "--runInBand", "--json",
               f"--outputFile={report}", *arguments]  # fmt: skip
    done = subprocess.run(command, cwd=package, env=env, capture_output=True, text=True, timeout=900)
    if not report.exists():
        raise RuntimeError(f"jest wrote no report:\n{done.stderr[-3000:]}")
    return json.loads(report.read_text())


def failures(results):
    """Each failed test of a jest report, with its messages, and each spec file that failed to run."""
    return [
        f"{test['fullName']}: {' '.join(test['failureMessages'])[:600]}"
        for suite in results["testResults"]
        for test in suite["assertionResults"]
        if test["status"] == "failed"
    ] + [suite["message"][:1000] for suite in results["testResults"] if suite.get("status") == "failed"
         and not suite["assertionResults"]]  # fmt: skip
