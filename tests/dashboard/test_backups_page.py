"""The dashboard's Backups page in a real browser: make an archive, see it listed, download it whole;
and its refusals, each paired with the same request succeeding: no CSRF token, no session, keys and
tokens, hostile archive names."""

import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from auth import audit, tokens
from backups import archive
from pages import accessible, csrf_of
from support import SECRET, eventually

ANON = tokens.api_key("anon", SECRET)
SERVICE = tokens.api_key("service_role", SECRET)


def archives(server):
    return sorted(path.name for path in Path(server.app.config["BACKUP_TO"]).glob("minibase-*.zip"))


def made(server, before, seconds=60):
    """The archive made since `before` (a list of names), once it is there."""
    new = eventually(lambda: sorted(set(archives(server)) - set(before)), seconds, 0.1, "an archive made")
    return new[-1]


def test_make_list_and_download_a_backup(server, admin_page):
    admin_page.get_by_role("link", name="Backups").click()
    admin_page.get_by_role("heading", name="Backups").wait_for()
    expect(
        admin_page.get_by_text("Not scheduled (BACKUP_SCHEDULE is not set); the newest 7 are kept")
    ).to_be_visible()
    before = archives(server)
    admin_page.get_by_role("button", name="Make a backup").click()
    expect(admin_page.get_by_role("status").first).to_have_text("A backup is being made.")
    name = made(server, before)
    admin_page.reload()
    link = admin_page.get_by_role("link", name=name)
    expect(link).to_be_visible()
    expect(admin_page.get_by_text(f"The last backup, {name}, is done.")).to_be_visible()
    with admin_page.expect_download() as download:
        link.click()
    saved = Path(download.value.path())
    assert download.value.suggested_filename == name
    assert saved.read_bytes() == (Path(server.app.config["BACKUP_TO"]) / name).read_bytes()
    verified = archive.verified(saved)  # whole, every checksum right
    assert verified.database == "sqlite"
    verified.close()
    actions = [entry["action"] for entry in server.run(lambda: audit.entries(1, 10, "backup")[0])]
    assert "backup_created" in actions and "backup_downloaded" in actions
    assert accessible(admin_page) == []


def test_making_a_backup_needs_the_csrf_token(server, admin_page, context):
    admin_page.goto("/dashboard/backups")
    before = archives(server)
    answer = context.request.post(f"{server.base}/dashboard/backups", form={})
    assert answer.status == 403
    time.sleep(0.5)
    assert archives(server) == before
    answer = context.request.post(f"{server.base}/dashboard/backups", form={"csrf": csrf_of(admin_page)})
    assert answer.ok
    made(server, before)


@pytest.mark.parametrize("credential", ["none", "anon", "service", "user_token"])
def test_keys_tokens_and_no_session_download_nothing(server, admin_page, context, browser, credential):
    admin_page.goto("/dashboard/backups")
    before = archives(server)
    if not before:
        context.request.post(f"{server.base}/dashboard/backups", form={"csrf": csrf_of(admin_page)})
        before = [made(server, before)]
    path = f"{server.base}/dashboard/backups/{before[0]}"
    assert context.request.get(path).ok  # the administrator's session may
    value = {"none": "", "anon": ANON, "service": SERVICE}.get(credential)
    if credential == "user_token":
        email = f"holder-{time.monotonic_ns()}@example.com"
        server.make_user(email, "holder-pw", admin=True)
        signed = context.request.post(
            f"{server.base}/auth/v1/token?grant_type=password",
            headers={"apikey": ANON},
            data={"email": email, "password": "holder-pw"},
        )
        value = signed.json()["access_token"]  # an administrator's, even
    other = browser.new_context(base_url=server.base)
    try:
        headers = {
            "apikey": value,
            "Authorization": f"Bearer {value}",
            "Cookie": f"minibase_dashboard={value}",
        }
        answer = other.request.get(path, headers=headers if value else {}, max_redirects=0)
        assert answer.status == 303 and answer.headers["location"].startswith("/dashboard/?next=")
        answer = other.request.post(f"{server.base}/dashboard/backups", headers=headers if value else {})
        assert answer.status == 401
    finally:
        other.close()


@pytest.mark.parametrize(
    "name",
    ["..%2F..%2Fdashboard.db", "..%2Fstorage", "%2e%2e%2fbackups", "minibase-x.zip%00", "minibase-ü.zip",
     "tables.toml", "%2Fetc%2Fpasswd"],
)  # fmt: skip
def test_a_hostile_archive_name_is_a_404(server, admin_page, context, name):
    answer = context.request.get(f"{server.base}/dashboard/backups/{name}", max_redirects=0)
    assert answer.status == 404 and answer.headers["content-type"] != "application/zip"
