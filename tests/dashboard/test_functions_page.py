"""The Functions page: the functions of FUNCTIONS_DIR with their settings, and the recent calls with
their status, error code and the function's own log lines; for administrators only, checked by
axe-core, under the dashboard's Content-Security-Policy (the lines open in <details>, no script)."""

from pathlib import Path

import pytest
import requests

from auth import tokens
from extensions import db
from pages import ADMIN, PASSWORD, Server, accessible, make_server
from support import SECRET, serve_app

FUNCTIONS = Path(__file__).resolve().parent.parent / "edge" / "functions"
ANON = tokens.api_key("anon", SECRET)
SERVICE = tokens.api_key("service_role", SECRET)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The dashboard's server, with tests/edge/functions as its FUNCTIONS_DIR."""
    tmp = tmp_path_factory.mktemp("dashboard-functions")
    app = make_server(tmp, FUNCTIONS_DIR=str(FUNCTIONS))
    base, stop = serve_app(app, threads=4)
    served = Server(base, app)
    served.make_user(ADMIN, PASSWORD, admin=True)
    yield served
    stop()
    app.extensions["minibase"].function_runner.close()
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


def invoke(server, name):
    headers = {"apikey": ANON, "Authorization": f"Bearer {ANON}"}
    return requests.post(f"{server.base}/functions/v1/{name}", headers=headers, timeout=30)


def test_the_page_lists_the_functions_and_their_recent_calls_with_their_lines(server, admin_page):
    assert invoke(server, "counter").status_code == 200
    assert invoke(server, "raises").status_code == 500
    page = admin_page
    page.get_by_role("link", name="Functions").click()
    page.get_by_role("heading", name="Functions", exact=True).wait_for()
    listed = page.locator("table").first.inner_text()
    assert "counter" in listed and "spins" in listed and "1.0 s" in listed  # spins: cpu = 1
    calls = page.locator("table").nth(1)
    first = calls.locator("tbody tr").first.inner_text()
    assert "raises" in first and "500" in first and "EDGE_FUNCTION_ERROR" in first
    calls.locator("tbody tr").first.locator("summary").click()
    shown = calls.locator("tbody tr").first.locator("pre").inner_text()
    assert "RuntimeError: boom [redacted]" in shown and SERVICE not in page.content()
    assert accessible(page) == []
    page.get_by_role("link", name="counter").first.click()
    page.get_by_role("heading", name="Recent calls of counter").wait_for()
    rows = page.locator("table").nth(1).locator("tbody tr")
    assert rows.count() >= 1 and all("counter" in row for row in rows.all_inner_texts())


def test_the_page_is_for_administrators_only(server):
    for headers in ({}, {"apikey": SERVICE, "Authorization": f"Bearer {SERVICE}"}):
        answer = requests.get(f"{server.base}/dashboard/functions", headers=headers, allow_redirects=False,
                              timeout=10)  # fmt: skip
        assert answer.status_code == 303 and answer.headers["Location"].startswith("/dashboard/?next=")
