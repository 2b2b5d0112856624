"""The dashboard in a real browser: signing in and out, the Users pages and their every action, the
audit log page; each page found by the names a person and a screen reader use, and checked by
axe-core."""

import re

from playwright.sync_api import expect

from pages import ADMIN, PASSWORD, accessible, sign_in


def test_sign_in_lands_on_users_with_the_navigation(admin_page):
    navigation = admin_page.get_by_role("navigation", name="Dashboard")
    for name in ("Users", "Audit log"):
        expect(navigation.get_by_role("link", name=name)).to_be_visible()
    expect(admin_page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(admin_page.get_by_role("link", name=ADMIN)).to_be_visible()  # the admin is a user too
    assert accessible(admin_page) == []


def test_the_sign_in_page_is_accessible_and_names_its_fields(page):
    page.goto("/dashboard/")
    expect(page.get_by_label("Email")).to_be_visible()
    expect(page.get_by_label("Password")).to_be_visible()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    assert accessible(page) == []


def test_signing_in_with_the_keyboard_alone(page):
    page.goto("/dashboard/")
    page.keyboard.press("Tab")  # the skip link
    page.keyboard.press("Tab")
    page.keyboard.type(ADMIN)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Users").wait_for()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


def test_a_wrong_password_shows_the_auth_apis_message(page):
    sign_in(page, password="not-the-password")
    expect(page.get_by_role("alert")).to_have_text("Invalid login credentials")
    assert page.get_by_label("Email").input_value() == ADMIN
    page.context.errors.clear()  # the 400 of the refused form is logged by the browser


def test_sign_out_ends_the_session(admin_page):
    admin_page.get_by_role("button", name="Sign out").click()
    admin_page.get_by_role("button", name="Sign in").wait_for()
    admin_page.goto("/dashboard/users")
    expect(admin_page.get_by_role("button", name="Sign in")).to_be_visible()


def test_search_sort_and_page_users(server, admin_page):
    for number in range(27):
        server.make_user(f"paged{number:02d}@example.com")
    admin_page.get_by_label("Search users").fill("paged")
    admin_page.get_by_label("Sort by").select_option("email")
    admin_page.get_by_role("button", name="Search").click()
    rows = admin_page.locator("main table tbody tr")
    expect(rows).to_have_count(25)
    expect(rows.first.get_by_role("link")).to_have_text("paged00@example.com")
    expect(admin_page.get_by_text("27 users matching")).to_be_visible()
    admin_page.get_by_role("link", name="Next page").click()
    expect(rows).to_have_count(2)
    assert [row.get_by_role("link").inner_text() for row in rows.all()] == [
        "paged25@example.com",
        "paged26@example.com",
    ]
    admin_page.get_by_label("Sort by").select_option("newest")
    admin_page.get_by_role("button", name="Search").click()
    expect(rows.first.get_by_role("link")).to_have_text("paged26@example.com")


def test_create_a_user_and_see_their_page(server, admin_page):
    admin_page.get_by_label("New user's email").fill("carol@example.com")
    admin_page.get_by_label("New user's password").fill("carol-password")
    admin_page.get_by_role("button", name="Create user").click()
    admin_page.get_by_role("heading", name="carol@example.com").wait_for()
    expect(admin_page.get_by_role("status")).to_have_text("User created.")
    for name in ("Ban", "Unban", "Sign out everywhere", "Send recovery link", "Delete user"):
        expect(admin_page.get_by_role("button", name=name, exact=True)).to_be_visible()
    assert accessible(admin_page) == []


def test_invite_a_user(admin_page):
    admin_page.get_by_label("Email to invite").fill("invited@example.com")
    admin_page.get_by_role("button", name="Send invitation").click()
    admin_page.get_by_role("heading", name="invited@example.com").wait_for()
    expect(admin_page.get_by_role("status")).to_have_text("Invitation sent.")


def open_user(page, server, email):
    page.goto(f"/dashboard/users/{server.user_id(email)}")
    page.get_by_role("heading", name=email).wait_for()


def test_ban_for_a_time_then_lift_it(server, admin_page, context):
    server.make_user("dave@example.com")
    api = context.request
    signed = api.post(
        f"{server.base}/auth/v1/token?grant_type=password",
        headers={"apikey": anon(server)},
        data={"email": "dave@example.com", "password": "secret-pw"},
    )
    assert signed.ok
    open_user(admin_page, server, "dave@example.com")
    admin_page.get_by_label("Ban for").select_option("168h")
    admin_page.get_by_role("button", name="Ban", exact=True).click()
    expect(admin_page.get_by_role("status")).to_have_text("User banned.")
    banned_until = admin_page.locator("dt:text-is('Banned until') + dd").inner_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", banned_until)
    assert admin_page.get_by_text("None").count() >= 1  # the ban ended the user's session
    refused = api.post(
        f"{server.base}/auth/v1/token?grant_type=password",
        headers={"apikey": anon(server)},
        data={"email": "dave@example.com", "password": "secret-pw"},
    )
    assert refused.status == 400 and refused.json()["error_code"] == "user_banned"
    admin_page.get_by_role("button", name="Unban").click()
    expect(admin_page.get_by_role("status")).to_have_text("Ban lifted.")
    expect(admin_page.locator("dt:text-is('Banned until') + dd")).to_have_text("not banned")


def anon(server):
    from auth import tokens
    from support import SECRET

    return tokens.api_key("anon", SECRET)


def test_sign_out_everywhere_ends_every_session(server, admin_page, context):
    server.make_user("erin@example.com")
    tokens_ = []
    for _ in range(2):
        answer = context.request.post(
            f"{server.base}/auth/v1/token?grant_type=password",
            headers={"apikey": anon(server)},
            data={"email": "erin@example.com", "password": "secret-pw"},
        )
        tokens_.append(answer.json()["access_token"])
    open_user(admin_page, server, "erin@example.com")
    sessions = admin_page.get_by_role("region", name="Sessions").locator("tbody tr")
    expect(sessions).to_have_count(2)
    admin_page.get_by_role("button", name="Sign out everywhere").click()
    expect(admin_page.get_by_role("status")).to_have_text("Every session of the user has ended.")
    expect(sessions).to_have_text("None")
    for token in tokens_:
        user = context.request.get(
            f"{server.base}/auth/v1/user",
            headers={"apikey": anon(server), "Authorization": f"Bearer {token}"},
        )
        assert user.status == 401


def test_send_a_recovery_and_a_magic_link(server, admin_page):
    server.make_user("fay@example.com")
    open_user(admin_page, server, "fay@example.com")
    admin_page.get_by_role("button", name="Send recovery link").click()
    expect(admin_page.get_by_role("status")).to_have_text("Recovery link sent.")
    admin_page.get_by_role("button", name="Send magic link").click()
    expect(admin_page.get_by_role("status")).to_have_text("Magic link sent.")
    admin_page.get_by_role("link", name="Audit log").click()
    admin_page.get_by_label("Search audit log").fill("fay@example.com")
    admin_page.get_by_role("button", name="Search").click()
    actions = admin_page.locator("tbody tr td:nth-child(3)")  # read once the results have loaded
    expect(actions.nth(0)).to_have_text("magic_link_sent")
    expect(actions.nth(1)).to_have_text("recovery_sent")


def test_edit_metadata_and_app_metadata(server, admin_page):
    server.make_user("gus@example.com", data={"plan": "free", "username": "gus"})
    open_user(admin_page, server, "gus@example.com")
    admin_page.get_by_label("User metadata (JSON)").fill('{"username": "gus", "team": "blue"}')
    admin_page.get_by_label("App metadata (JSON)").fill('{"tier": 2}')
    admin_page.get_by_role("button", name="Save metadata").click()
    expect(admin_page.get_by_role("status")).to_have_text("Metadata saved.")
    import json

    assert json.loads(admin_page.get_by_label("User metadata (JSON)").input_value()) == {
        "username": "gus",
        "team": "blue",
    }  # "plan" removed: the form says the whole object
    assert json.loads(admin_page.get_by_label("App metadata (JSON)").input_value()) == {"tier": 2}
    admin_page.get_by_label("App metadata (JSON)").fill("[1, 2]")
    admin_page.get_by_role("button", name="Save metadata").click()
    expect(admin_page.get_by_role("alert")).to_have_text("App metadata must be a JSON object")
    admin_page.context.errors.clear()


def test_delete_a_user_after_confirming(server, admin_page):
    server.make_user("hal@example.com")
    open_user(admin_page, server, "hal@example.com")
    admin_page.get_by_role("button", name="Delete user").click()
    admin_page.get_by_role("heading", name="Delete hal@example.com?").wait_for()
    assert accessible(admin_page) == []
    admin_page.get_by_role("button", name="Delete user").click()
    expect(admin_page.get_by_role("status")).to_have_text("User deleted.")
    admin_page.get_by_label("Search users").fill("hal@")
    admin_page.get_by_role("button", name="Search").click()
    expect(admin_page.locator("main table tbody tr")).to_have_count(0)


def test_the_audit_log_page_searches_and_is_accessible(server, admin_page):
    admin_page.get_by_role("link", name="Audit log").click()
    admin_page.wait_for_url(re.compile(r"/dashboard/audit"))
    expect(admin_page.locator("thead th").first).to_have_text("Time")
    headers = admin_page.locator("thead th").all_inner_texts()
    assert headers[:3] == ["Time", "Actor", "Action"] and "IP" in headers
    admin_page.get_by_label("Search audit log").fill("sign_in")
    admin_page.get_by_role("button", name="Search").click()
    admin_page.wait_for_url(re.compile(r"[?&]q=sign_in"))
    first = admin_page.locator("tbody tr").first.locator("td").all_inner_texts()
    assert first[1] == ADMIN and first[2] == "sign_in" and first[4] == "127.0.0.1" and first[5] == "dashboard"
    assert accessible(admin_page) == []


def test_at_a_phones_width_nothing_overflows(browser, server):
    context = browser.new_context(base_url=server.base, viewport={"width": 375, "height": 740})
    try:
        page = context.new_page()
        sign_in(page)
        page.get_by_role("heading", name="Users").wait_for()
        for path in ("/dashboard/users", f"/dashboard/users/{server.user_id(ADMIN)}", "/dashboard/audit"):
            page.goto(path)
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), path
            expect(page.get_by_role("button", name="Sign out", exact=True)).to_be_visible()
    finally:
        context.close()


def test_anonymous_users_and_passkeys_are_shown(server, admin_page):
    """An anonymous visitor is listed as such (never by its placeholder address); a user's passkeys
    are on their page."""
    import uuid
    from datetime import datetime

    from auth import anonymous
    from extensions import db
    from models.auth import WebAuthnCredential

    visitor = server.run(lambda: anonymous.sign_up({})["user"]["id"])
    owner = server.make_user("keys@example.com")
    now = datetime(2026, 11, 29, 1, 2, 3)
    row = {"id": str(uuid.uuid4()), "user_id": owner, "credential_key": "k" * 64, "credential_id": "AA",
           "public_key": "AA", "friendly_name": "Work laptop", "created_at": now,
           "updated_at": now}  # fmt: skip
    server.run(lambda: db.session.add(WebAuthnCredential(**row)))
    admin_page.goto("/dashboard/users")
    listed = admin_page.get_by_role("row").filter(has=admin_page.get_by_role("link", name="(anonymous)"))
    expect(listed).to_contain_text("anonymous")
    expect(admin_page.locator("main")).not_to_contain_text("anonymous.invalid")
    admin_page.goto(f"/dashboard/users/{visitor}")
    admin_page.get_by_role("heading", name=f"Anonymous user {visitor}").wait_for()
    expect(admin_page.locator("main")).not_to_contain_text("anonymous.invalid")
    assert accessible(admin_page) == []
    admin_page.goto(f"/dashboard/users/{owner}")
    admin_page.get_by_role("heading", name="Passkeys").wait_for()
    expect(admin_page.get_by_role("row").filter(has_text="Work laptop")).to_contain_text("never")
