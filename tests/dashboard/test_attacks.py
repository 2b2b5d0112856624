"""The attacks on the dashboard, each refused by a defence the test would fail without: a change
without the session's CSRF token or with another session's, a non-admin's password, cookie or token,
the anon and service keys, a cookie replayed after sign-out, HTML in metadata shown as text, an
administrator with a second factor who does not give the code, a `next` that leads off the site,
guessing past the auth API's lockout."""

import time

import pyotp
import pytest
from playwright.sync_api import expect

from app import create_app
from auth import audit, tokens
from pages import ADMIN, PASSWORD, Server, accessible, csrf_of, make_server, sign_in
from support import SECRET, serve_app

ANON = tokens.api_key("anon", SECRET)
SERVICE = tokens.api_key("service_role", SECRET)


def user_is_banned(server, email):
    from auth.administration import admin_get_user

    return server.run(lambda: admin_get_user(server.user_id(email))["banned_until"]) is not None


def test_a_change_without_the_csrf_token_is_refused(server, admin_page, context):
    server.make_user("target1@example.com")
    user_id = server.user_id("target1@example.com")
    answer = context.request.post(f"{server.base}/dashboard/users/{user_id}/ban", form={"duration": "24h"})
    assert answer.status == 403
    assert not user_is_banned(server, "target1@example.com")
    # The same request with the token goes through: the token is what was missing.
    answer = context.request.post(
        f"{server.base}/dashboard/users/{user_id}/ban", form={"duration": "24h", "csrf": csrf_of(admin_page)}
    )
    assert answer.ok and user_is_banned(server, "target1@example.com")


def test_another_sessions_csrf_token_is_refused(server, browser, admin_page, context):
    server.make_user("target2@example.com")
    user_id = server.user_id("target2@example.com")
    other = browser.new_context(base_url=server.base)
    try:
        other_page = other.new_page()
        sign_in(other_page)
        other_page.get_by_role("heading", name="Users").wait_for()
        foreign = csrf_of(other_page)
    finally:
        other.close()
    assert foreign != csrf_of(admin_page)
    answer = context.request.post(
        f"{server.base}/dashboard/users/{user_id}/ban", form={"duration": "24h", "csrf": foreign}
    )
    assert answer.status == 403 and not user_is_banned(server, "target2@example.com")


def test_the_sign_in_form_needs_its_own_token(server, context):
    answer = context.request.post(
        f"{server.base}/dashboard/sign-in", form={"email": ADMIN, "password": PASSWORD, "csrf": "forged"}
    )
    assert answer.status == 403
    assert not [cookie for cookie in context.cookies() if cookie["name"] == "minibase_dashboard"]


def test_a_non_admin_cannot_sign_in_even_with_the_right_password(server, page):
    server.make_user("plain@example.com", "plain-password")
    sign_in(page, "plain@example.com", "plain-password")
    expect(page.get_by_role("alert")).to_have_text("Invalid login credentials")
    assert not [c for c in page.context.cookies() if c["name"] == "minibase_dashboard"]
    page.context.errors.clear()
    entries = server.run(lambda: audit.entries(1, 5, "plain@example.com")[0])
    assert [entry["action"] for entry in entries[:2]] == ["dashboard_refused", "sign_in"]
    # The session the password opened is ended at once: nothing of it is left to use.
    from auth.administration import admin_list_sessions

    user_id = server.user_id("plain@example.com")
    assert server.run(lambda: admin_list_sessions(user_id)) == []


@pytest.mark.parametrize("credential", ["user_token", "anon", "service"])
def test_tokens_and_keys_open_nothing(server, context, credential):
    """A user's access token, the anon key or the service key, as a bearer, an apikey or the cookie's
    value: each is met by the sign-in page."""
    if credential == "user_token":
        email = f"holder-{time.monotonic_ns()}@example.com"
        server.make_user(email, "holder-pw", admin=True)
        signed = context.request.post(
            f"{server.base}/auth/v1/token?grant_type=password",
            headers={"apikey": ANON},
            data={"email": email, "password": "holder-pw"},
        )
        value = signed.json()["access_token"]  # an administrator's, even
    else:
        value = ANON if credential == "anon" else SERVICE
    headers = {"apikey": value, "Authorization": f"Bearer {value}", "Cookie": f"minibase_dashboard={value}"}
    for path in ("/dashboard/users", "/dashboard/audit"):
        answer = context.request.get(f"{server.base}{path}", headers=headers, max_redirects=0)
        assert answer.status == 303 and answer.headers["location"].startswith("/dashboard/?next=")


def test_an_admin_whose_role_is_revoked_is_out_at_the_next_request(server, browser):
    server.make_user("former@example.com", "former-pw", admin=True)
    context = browser.new_context(base_url=server.base)
    try:
        page = context.new_page()
        sign_in(page, "former@example.com", "former-pw")
        page.get_by_role("heading", name="Users").wait_for()
        from auth.administration import admin_update_user

        user_id = server.user_id("former@example.com")
        server.run(lambda: admin_update_user(user_id, {"app_metadata": {"role": None}}))
        page.goto("/dashboard/users")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    finally:
        context.close()


def test_a_cookie_replayed_after_sign_out_is_refused(server, browser, admin_page, context):
    cookie = next(c for c in context.cookies() if c["name"] == "minibase_dashboard")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/dashboard"
    admin_page.get_by_role("button", name="Sign out", exact=True).click()
    admin_page.get_by_role("button", name="Sign in").wait_for()
    replay = browser.new_context(base_url=server.base)
    try:
        replay.add_cookies([{**cookie, "url": server.base, "domain": None, "path": None}])
    except Exception:
        replay.add_cookies(
            [{"name": cookie["name"], "value": cookie["value"], "url": server.base + "/dashboard/"}]
        )
    try:
        page = replay.new_page()
        page.goto("/dashboard/users")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        assert page.url.startswith(f"{server.base}/dashboard/?next=")
    finally:
        replay.close()


def test_html_in_metadata_is_shown_as_text(server, admin_page):
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    server.make_user("mallory@example.com", data={"username": hostile, "bio": hostile})
    admin_page.goto(f"/dashboard/users/{server.user_id('mallory@example.com')}")
    admin_page.get_by_role("heading", name="mallory@example.com").wait_for()
    assert hostile.replace('"', '\\"') in admin_page.get_by_label("User metadata (JSON)").input_value()
    assert admin_page.locator("main img").count() == 0 and admin_page.locator("main script").count() == 0
    # The context's checks fail the test on a dialog (alert) or a CSP violation in the console.


def test_open_redirects_through_next_are_refused(server, page):
    for target in (
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "/dashboard/\\\\evil.example",
    ):
        page.context.clear_cookies()
        sign_in(page, path=f"/dashboard/?next={target}")
        page.get_by_role("heading", name="Users").wait_for()
        assert page.url == f"{server.base}/dashboard/users", target
    page.context.clear_cookies()
    sign_in(page, path="/dashboard/?next=/dashboard/audit")
    page.get_by_role("heading", name="Audit log").wait_for()


def enroll_factor(server, email, password):
    """A verified TOTP factor for the user, through the auth API; its secret."""
    import requests

    headers = {"apikey": ANON}
    session = requests.post(
        f"{server.base}/auth/v1/token?grant_type=password",
        headers=headers,
        json={"email": email, "password": password},
        timeout=10,
    ).json()
    headers["Authorization"] = f"Bearer {session['access_token']}"
    factor = requests.post(
        f"{server.base}/auth/v1/factors", headers=headers, json={"factor_type": "totp"}, timeout=10
    ).json()
    challenge = requests.post(
        f"{server.base}/auth/v1/factors/{factor['id']}/challenge", headers=headers, timeout=10
    )
    secret = factor["totp"]["secret"]
    verified = requests.post(
        f"{server.base}/auth/v1/factors/{factor['id']}/verify",
        headers=headers,
        json={"challenge_id": challenge.json()["id"], "code": pyotp.TOTP(secret).now()},
        timeout=10,
    )
    assert verified.ok, verified.text
    return secret


def test_an_admin_with_a_factor_must_give_the_code(server, page, context):
    server.make_user("tess@example.com", "tess-password", admin=True)
    secret = enroll_factor(server, "tess@example.com", "tess-password")
    sign_in(page, "tess@example.com", "tess-password")
    page.get_by_label("Code").wait_for()
    assert accessible(page) == []
    # Past the password, short of the code: no page, and no change, is open.
    page.goto("/dashboard/users")
    expect(page.get_by_label("Code")).to_be_visible()
    expect(page.get_by_role("navigation")).to_have_count(0)
    csrf = csrf_of(page)
    user_id = server.user_id(ADMIN)
    answer = context.request.post(
        f"{server.base}/dashboard/users/{user_id}/ban",
        form={"duration": "24h", "csrf": csrf},
        max_redirects=0,
    )
    assert answer.status == 401 and not user_is_banned(server, ADMIN)
    page.get_by_label("Code").fill("000000" if pyotp.TOTP(secret).now() != "000000" else "111111")  # wrong
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Invalid TOTP code entered")
    context.errors.clear()
    # A code is good once per step, and the enrollment spent this step's: the next step's code is
    # accepted now too (one step either side).
    page.get_by_label("Code").fill(pyotp.TOTP(secret).at(time.time() + 30))
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Users").wait_for()


def test_failures_count_toward_the_auth_apis_lockout(tmp_path, browser):
    app = make_server(tmp_path)  # RATE_LIMITS on, as in production
    base, stop = serve_app(app, threads=2)
    try:
        server = Server(base, app)
        server.make_user("locked@example.com", "right-password", admin=True)
        context = browser.new_context(base_url=base)
        page = context.new_page()
        for _ in range(5):
            sign_in(page, "locked@example.com", "wrong-password")
            expect(page.get_by_role("alert")).to_have_text("Invalid login credentials")
        import requests

        for _ in range(5):  # the auth API's failures add to the same count
            answer = requests.post(
                f"{base}/auth/v1/token?grant_type=password",
                headers={"apikey": ANON},
                json={"email": "locked@example.com", "password": "wrong-password"},
                timeout=10,
            )
            assert answer.status_code == 400
        sign_in(page, "locked@example.com", "right-password")
        expect(page.get_by_role("alert")).to_have_text("Too many failed sign-in attempts, try again later")
        context.close()
        actions = server.run(lambda: [e["action"] for e in audit.entries(1, 20, "locked@")[0]])
        assert actions.count("sign_in_failed") == 10 and "lockout" in actions and "sign_in" not in actions
    finally:
        stop()


def test_dashboard_off_removes_it(tmp_path):
    app = create_app(
        {"DATABASE_URL": f"sqlite:///{tmp_path}/off.db", "JWT_SECRET": SECRET, "DASHBOARD": False,
         "STORAGE_ROOT": str(tmp_path / "storage")}
    )  # fmt: skip
    client = app.test_client()
    for path in ("/dashboard/", "/dashboard/users", "/dashboard/static/dashboard.js"):
        answer = client.get(path)
        assert answer.status_code == 404 and answer.is_json, path
    assert client.post("/dashboard/sign-in").status_code == 404


def test_the_cookie_is_secure_behind_https(tmp_path):
    from auth import administration
    from database import transactions

    app = create_app(
        {"DATABASE_URL": f"sqlite:///{tmp_path}/tls.db", "JWT_SECRET": SECRET, "BCRYPT_ROUNDS": 4,
         "TRUSTED_PROXIES": 1, "STORAGE_ROOT": str(tmp_path / "storage")}
    )  # fmt: skip
    with app.app_context():
        transactions.write(
            administration.admin_create_user,
            {"email": ADMIN, "password": PASSWORD, "app_metadata": {"role": "admin"}},
        )
    client = app.test_client()
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    form = client.get("/dashboard/", headers=https)
    assert "Secure" in form.headers["Set-Cookie"]
    token = form.headers["Set-Cookie"].split(";")[0].split("=", 1)[1]
    client.set_cookie("minibase_dashboard_sign_in", token, path="/dashboard")
    signed = client.post(
        "/dashboard/sign-in", headers=https, data={"email": ADMIN, "password": PASSWORD, "csrf": token}
    )
    assert signed.status_code == 303
    cookie = next(c for c in signed.headers.getlist("Set-Cookie") if c.startswith("minibase_dashboard="))
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    plain = app.test_client().get("/dashboard/")
    assert "Secure" not in plain.headers["Set-Cookie"]


def test_a_cookie_past_its_lifetime_is_refused(admin_page, monkeypatch):
    from datetime import timedelta

    from dashboard.sessions import LIFETIME

    later = tokens.utcnow() + LIFETIME + timedelta(seconds=1)
    monkeypatch.setattr(tokens, "utcnow", lambda: later)  # the server runs in this process
    admin_page.goto("/dashboard/users")
    expect(admin_page.get_by_role("button", name="Sign in")).to_be_visible()
