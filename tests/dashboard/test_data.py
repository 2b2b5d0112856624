"""The dashboard's Tables, Storage and Settings pages in a real browser: each action through the
table API's and Storage's own services, each page checked by axe-core."""

import io
import re
from pathlib import Path

from PIL import Image
from playwright.sync_api import expect

from pages import accessible
from support import SECRET

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


def seed(server, rows):
    """Rows of `items`, inserted through the table API's service as the service key."""
    from dashboard import tables

    for row in rows:
        server.run(lambda row=row: tables.insert("items", row))


def test_tables_lists_each_exposed_table_with_its_rules(admin_page):
    admin_page.get_by_role("link", name="Tables").click()
    admin_page.get_by_role("heading", name="Tables").wait_for()
    row = admin_page.get_by_role("row").filter(has=admin_page.get_by_role("link", name="items"))
    cells = [cell.strip() for cell in row.locator("td").all_inner_texts()]
    assert cells == ["items", "anon", "authenticated", "owner", "owner", "user_id", "select: price >= 0"]
    assert accessible(admin_page) == []


def test_browse_filter_sort_page_and_export(server, admin_page):
    seed(server, [{"name": f"thing {n:02d}", "price": n, "user_id": 1} for n in range(30)])
    seed(server, [{"name": "=HYPERLINK(1)", "price": 99}])
    admin_page.goto("/dashboard/tables/items")
    expect(admin_page.get_by_text("31 rows.")).to_be_visible()
    body = admin_page.locator("main table tbody tr")
    expect(body).to_have_count(25)
    admin_page.get_by_role("link", name="Next page").click()
    expect(body).to_have_count(6)
    admin_page.get_by_label("Filters").fill("price=gte.10&name=like.thing*")
    admin_page.get_by_label("Order").fill("price.desc")
    admin_page.get_by_role("button", name="Apply").click()
    expect(admin_page.get_by_text("20 rows.")).to_be_visible()
    expect(body.first.locator("td").nth(3)).to_have_text("thing 29")
    admin_page.get_by_role("link", name="price").click()  # the header sorts, ascending first
    expect(body.first.locator("td").nth(3)).to_have_text("thing 10")
    with admin_page.expect_download() as download:
        admin_page.get_by_role("link", name="Export CSV").click()
    text = Path(download.value.path()).read_text()
    lines = text.splitlines()
    assert lines[0] == "id,user_id,name,price,tags" and len(lines) == 21
    admin_page.goto("/dashboard/tables/items?filter=price=eq.99")
    with admin_page.expect_download() as download:
        admin_page.get_by_role("link", name="Export CSV").click()
    assert Path(download.value.path()).read_text().splitlines()[1].endswith(",'=HYPERLINK(1),99.0,")
    admin_page.get_by_label("Filters").fill("price=zz.1")
    admin_page.get_by_role("button", name="Apply").click()
    assert "zz" in admin_page.get_by_role("alert").inner_text()
    admin_page.context.errors.clear()
    admin_page.goto("/dashboard/tables/items")
    assert accessible(admin_page) == []


def test_insert_edit_and_delete_a_row(server, admin_page):
    admin_page.goto("/dashboard/tables/items")
    admin_page.get_by_role("link", name="Insert row").click()
    admin_page.get_by_label("name").fill("<b>bold</b> lamp")
    admin_page.get_by_label("price").fill("12.5")
    admin_page.get_by_label("tags").fill('["new"]')
    admin_page.get_by_role("button", name="Insert row").click()
    expect(admin_page.get_by_role("status")).to_have_text("Row inserted.")
    heading = admin_page.get_by_role("heading", level=1).inner_text()
    row_id = re.fullmatch(r"Row (\d+) of items", heading)[1]
    assert admin_page.get_by_label("tags").input_value() == '["new"]'
    assert accessible(admin_page) == []
    admin_page.get_by_label("price").fill("13")
    admin_page.get_by_role("button", name="Save row").click()
    expect(admin_page.get_by_role("status")).to_have_text("Row saved.")
    assert admin_page.get_by_label("price").input_value() == "13.0"
    admin_page.get_by_label("Yes, delete this row").check()
    admin_page.get_by_role("button", name="Delete row").click()
    expect(admin_page.get_by_role("status")).to_have_text("Row deleted.")
    admin_page.goto(f"/dashboard/tables/items?filter=id=eq.{row_id}")
    expect(admin_page.get_by_text("0 rows.")).to_be_visible()
    admin_page.goto("/dashboard/audit?q=items")
    actions = admin_page.locator("tbody tr td:nth-child(3)").all_inner_texts()
    assert actions[:3] == ["row_deleted", "row_updated", "row_inserted"]


def png(color):
    out = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(out, format="PNG")
    return out.getvalue()


def test_buckets_and_their_files(server, admin_page, context):
    admin_page.get_by_role("link", name="Storage").click()
    expect(admin_page.get_by_role("link", name="avatars")).to_be_visible()
    assert accessible(admin_page) == []
    admin_page.get_by_label("Bucket name").fill("docs")
    admin_page.get_by_label("File size limit").fill("1MB")
    admin_page.get_by_role("button", name="Create bucket").click()
    expect(admin_page.get_by_role("status")).to_have_text("Bucket created.")
    hostile = '<img src=x onerror="alert(1)">.png'
    admin_page.get_by_label("Upload").set_input_files(
        {"name": hostile, "mimeType": "image/png", "buffer": png("red")}
    )
    admin_page.get_by_role("button", name="Upload file").click()
    expect(admin_page.get_by_role("status")).to_have_text("File uploaded.")
    expect(admin_page.get_by_role("link", name=hostile)).to_be_visible()  # the name as text
    preview = admin_page.get_by_role("img", name=f"Preview of {hostile}")
    preview.wait_for()
    assert admin_page.evaluate("(img) => img.naturalWidth", preview.element_handle()) == 8
    with admin_page.expect_download() as download:
        admin_page.get_by_role("link", name=hostile).click()
    assert Path(download.value.path()).read_bytes() == png("red")
    assert accessible(admin_page) == []

    admin_page.get_by_label(f"New name of {hostile}").fill("pics/red.png")
    admin_page.get_by_role("button", name=f"Move {hostile}").click()
    expect(admin_page.get_by_role("status")).to_have_text("File moved.")
    expect(admin_page.get_by_role("link", name="red.png")).to_be_visible()  # now in the folder pics/

    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base)
    admin_page.get_by_role("button", name="Signed URL of red.png").click()
    admin_page.get_by_role("button", name="Copy").click()
    expect(admin_page.get_by_role("button", name="Copied")).to_be_visible()
    copied = admin_page.evaluate("navigator.clipboard.readText()")
    assert copied == admin_page.get_by_label("Signed URL").input_value()
    assert accessible(admin_page) == []
    assert copied.startswith(f"{server.base}/storage/v1/object/sign/docs/pics/red.png?token=")
    assert context.request.get(copied).body() == png("red")  # no API key: the token is the permission
    admin_page.get_by_role("link", name="Back to the folder").click()

    admin_page.get_by_role("button", name="Delete red.png").click()
    expect(admin_page.get_by_role("status")).to_have_text("File deleted.")
    expect(admin_page.get_by_text("No file here yet.")).to_be_visible()


def test_edit_empty_and_delete_a_bucket(server, admin_page):
    admin_page.goto("/dashboard/storage")
    admin_page.get_by_label("Bucket name").fill("scratch")
    admin_page.get_by_role("button", name="Create bucket").click()
    admin_page.get_by_label("Public (anyone may read its files, no API key)").check()
    admin_page.get_by_label("Allowed MIME types").fill("text/plain")
    admin_page.get_by_role("button", name="Save bucket").click()
    expect(admin_page.get_by_role("status")).to_have_text("Bucket saved.")
    assert admin_page.get_by_label("Allowed MIME types").input_value() == "text/plain"
    admin_page.get_by_label("Upload").set_input_files(
        {"name": "a.txt", "mimeType": "text/plain", "buffer": b"a"}
    )
    admin_page.get_by_role("button", name="Upload file").click()
    admin_page.get_by_label("Upload").set_input_files(
        {"name": "b.png", "mimeType": "image/png", "buffer": png("blue")}
    )
    admin_page.get_by_role("button", name="Upload file").click()
    assert "mime type" in admin_page.get_by_role("alert").inner_text().lower()  # the bucket's rule holds
    admin_page.context.errors.clear()
    admin_page.goto("/dashboard/storage/scratch")
    admin_page.get_by_label("Bucket name to delete it").fill("scratch")
    admin_page.get_by_role("button", name="Delete bucket").click()
    assert "not empty" in admin_page.get_by_role("alert").inner_text()
    admin_page.context.errors.clear()
    admin_page.goto("/dashboard/storage/scratch")
    admin_page.get_by_label("Bucket name to empty it").fill("scratch")
    admin_page.get_by_role("button", name="Empty bucket").click()
    expect(admin_page.get_by_role("status")).to_have_text("Bucket emptied.")
    admin_page.get_by_label("Bucket name to delete it").fill("scratch")
    admin_page.get_by_role("button", name="Delete bucket").click()
    expect(admin_page.get_by_role("status")).to_have_text("Bucket deleted.")
    expect(admin_page.get_by_role("link", name="scratch")).to_have_count(0)


def test_settings_shows_health_and_masks_secrets(admin_page):
    admin_page.get_by_role("link", name="Settings").click()
    admin_page.get_by_role("heading", name="Health and settings").wait_for()
    health = admin_page.get_by_role("region", name="Health")
    expect(health.get_by_role("row", name=re.compile("^Database reachable"))).to_be_visible()
    expect(health.get_by_role("row", name=re.compile("^SMTP not used"))).to_be_visible()
    expect(health.get_by_role("row", name=re.compile("^Redis not used"))).to_be_visible()
    expect(health.get_by_role("row", name=re.compile("^Storage reachable"))).to_be_visible()
    newest = max(path.name[:4] for path in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    expect(health.get_by_role("row", name=re.compile(f"^Migrations at {newest}"))).to_be_visible()
    expect(admin_page.get_by_role("region", name="Figures")).to_contain_text("set METRICS=on")
    text = admin_page.locator("main").inner_text()
    assert SECRET not in text and "JWT_SECRET" in text
    expect(admin_page.get_by_role("row", name=re.compile("^JWT_SECRET ••••••$"))).to_be_visible()
    assert accessible(admin_page) == []
