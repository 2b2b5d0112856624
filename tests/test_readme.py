"""The README's commands run as written: its bash blocks, in order, against `python wsgi.py` in a
fresh copy of the project (its own instance/ and tables.toml), with curl failing on any HTTP error."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from support import eventually, free_port

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
NOT_COPIED = shutil.ignore_patterns(
    ".venv*", ".git", "instance", "tests", "tables.toml", ".env", "__pycache__", ".*cache*"
)


def readme_blocks():
    """The README's bash blocks that talk to a running server or set one up (not the make targets)."""
    blocks = BLOCK.findall((ROOT / "README.md").read_text())
    return [block for block in blocks if "curl" in block or "CREATE TABLE" in block]


@pytest.fixture
def project(tmp_path):
    copy = tmp_path / "minibase"
    shutil.copytree(ROOT, copy, ignore=NOT_COPIED)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


def serve(project, port):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "JWT_SECRET", "TABLES_CONFIG")}
    process = subprocess.Popen(
        [sys.executable, "wsgi.py"],
        cwd=project,
        env={**env, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def answered():
        assert process.poll() is None, "wsgi.py exited"
        # connect: 1 s while it starts; read: up to 10 s, a loaded first answer can be slow
        return (requests.get(f"http://127.0.0.1:{port}/health", timeout=(1, 10)),)  # a 503 is falsy

    eventually(answered, 30, 0.05, "wsgi.py answered", ignoring=requests.ConnectionError)
    return process


def run(script, project, port, shell_state):
    """Run `script` in bash in `project`, after the variables earlier blocks set; returns stdout."""
    script = script.replace("localhost:8000", f"127.0.0.1:{port}")
    script = re.sub(r"\bcurl ", "curl --fail-with-body ", script)
    done = subprocess.run(
        [
            "bash",
            "-euo",
            "pipefail",
            "-c",
            f"{shell_state}\n{script}\ndeclare -p KEY ACCESS_TOKEN 2>/dev/null || true",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"{script}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-2000:]}"
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_readme_commands_run_as_written(project):
    blocks = readme_blocks()
    assert len(blocks) >= 3, "the README lost its walk-through"
    port = free_port()
    server = serve(project, port)
    output, state = "", ""
    try:
        for block in blocks:
            if "CREATE TABLE" in block:
                run(block, project, port, state)
                server.send_signal(signal.SIGTERM)  # "Restart (make run)"
                assert server.wait(timeout=40) == 0
                server = serve(project, port)
                continue
            printed = run(block, project, port, state)
            state = "\n".join(line for line in printed.splitlines() if line.startswith("declare"))
            output += printed
    finally:
        server.kill()
        server.wait(timeout=10)
    assert '"email":"ann@example.com"' in output.replace(" ", "")
    assert output.count("Cafe Luna") >= 3, output[-3000:]
    assert "HTTP/1.1 204" in output
