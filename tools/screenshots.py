"""`make screenshots`: the dashboard's pages in Debian's Chromium (the browser the tests drive),
saved as docs/dashboard/*.png for docs/dashboard.md. A throwaway minibase on a temporary SQLite
file, with a few users, rows and files, served by waitress on 127.0.0.1."""

import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "dashboard")]

from PIL import Image  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from pages import ADMIN, CHROMIUM, PASSWORD, Server, make_server, sign_in  # noqa: E402
from support import serve_app  # noqa: E402

OUT = ROOT / "docs" / "dashboard"
PAGES = [  # (file, path, what to wait for)
    ("sign-in", "/dashboard/", "Sign in"),
    ("users", "/dashboard/users", "Users"),
    ("user", "/dashboard/users/{ann}", "ann@example.com"),
    ("tables", "/dashboard/tables", "Tables"),
    ("rows", "/dashboard/tables/items", "items"),
    ("storage", "/dashboard/storage", "Storage"),
    ("bucket", "/dashboard/storage/avatars", "Bucket avatars"),
    ("audit-log", "/dashboard/audit", "Audit log"),
    ("settings", "/dashboard/settings", "Health and settings"),
]


def seed(server):
    from dashboard import storage as storage_pages
    from dashboard import tables

    server.make_user(ADMIN, PASSWORD, admin=True)
    people = ["ann", "bob", "carol", "dave"]
    for name in people:
        server.make_user(f"{name}@example.com", data={"first_name": name.title(), "plan": "free"})
    for number, (name, price) in enumerate([("lamp", 24.5), ("desk", 180.0), ("chair", 75.0)], start=1):
        server.run(
            lambda row={"name": name, "price": price, "user_id": number, "tags": ["new"]}: tables.insert(
                "items", row
            )
        )
    for color in ("tomato", "teal", "gold"):
        image = io.BytesIO()
        Image.new("RGB", (64, 64), color).save(image, format="PNG")
        image.seek(0)
        with server.app.app_context():
            storage_pages.upload("avatars", f"{color}.png", image, "image/png")
    return {"ann": server.user_id("ann@example.com")}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        app = make_server(Path(tmp))
        base, stop = serve_app(app, threads=4)
        try:
            ids = seed(Server(base, app))
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page(base_url=base, viewport={"width": 1100, "height": 720})
                for name, path, heading in PAGES:
                    if name == "users":
                        sign_in(page)
                    page.goto(path.format(**ids))
                    page.get_by_role("heading", name=heading).first.wait_for()
                    page.screenshot(path=OUT / f"{name}.png", full_page=False)
                    print(f"docs/dashboard/{name}.png")
                phone = browser.new_page(base_url=base, viewport={"width": 375, "height": 720})
                sign_in(phone)
                phone.get_by_role("heading", name="Users").wait_for()
                phone.screenshot(path=OUT / "users-phone.png")
                print("docs/dashboard/users-phone.png")
                browser.close()
        finally:
            stop()


if __name__ == "__main__":
    main()
