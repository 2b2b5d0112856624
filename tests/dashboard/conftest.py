"""Fixtures of the dashboard tests: Debian's Chromium driven by Playwright (one browser for the whole
run, a fresh context per test), a real waitress server with the dashboard on a SQLite file, and an
administrator. Each page a test opens is checked when the test ends: no request left the origin,
the console logged no error (a Content-Security-Policy violation is one)."""

import pytest

from extensions import db
from pages import ADMIN, PASSWORD, Server, make_server, sign_in
from support import serve_app


@pytest.fixture(scope="session")
def browser(chromium):
    """Debian's Chromium, launched once (tests/conftest.py)."""
    return chromium


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """minibase with its dashboard, served by waitress, and an administrator (ADMIN, PASSWORD)."""
    tmp = tmp_path_factory.mktemp("dashboard")
    app = make_server(tmp)
    base, stop = serve_app(app, threads=4)
    served = Server(base, app)
    served.make_user(ADMIN, PASSWORD, admin=True)
    yield served
    stop()
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def context(browser, server):
    """A fresh browser context (its own cookies) on the server, that lets no request leave the origin
    and keeps every console error; both are checked when the test ends."""
    context = browser.new_context(base_url=server.base)
    context.outside, context.errors = [], []

    def only_the_origin(route):
        if route.request.url.startswith(server.base + "/"):
            route.continue_()
        else:
            context.outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_origin)
    context.on("page", lambda page: watch(context, page))
    yield context
    outside, errors = context.outside, context.errors
    context.close()
    assert outside == [], f"requests left the origin: {outside}"
    assert errors == [], f"console errors: {errors}"


def watch(context, page):
    page.on(
        "console", lambda message: context.errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: context.errors.append(str(error)))
    page.on("dialog", lambda dialog: context.errors.append(f"dialog: {dialog.message}") or dialog.dismiss())


@pytest.fixture
def page(context):
    return context.new_page()


@pytest.fixture
def admin_page(page):
    """A page signed in as the administrator, on the Users page."""
    sign_in(page)
    page.get_by_role("heading", name="Users").wait_for()
    return page
