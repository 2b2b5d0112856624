"""What the dashboard tests (and `make screenshots`) use: a served app with a table and a bucket,
an administrator, signing in, axe-core's check of a page, a page's CSRF token."""

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from app import create_app
from auth import accounts, administration
from database import transactions
from extensions import db
from support import SECRET

CHROMIUM = "/usr/bin/chromium"
ADMIN, PASSWORD = "boss@example.com", "boss-password"
JS_DIR = Path(__file__).resolve().parent.parent / "js"


@dataclass
class Server:
    base: str
    app: object

    def make_user(self, email, password="secret-pw", admin=False, **fields):
        """A user made through the admin API's service; their id."""
        with self.app.app_context():
            body = {"email": email, "password": password, **fields}
            if admin:
                body["app_metadata"] = {"role": "admin"}
            user_id = administration.admin_create_user(body)["id"]
            db.session.remove()
            return user_id

    def run(self, work, *args):
        """`work` in the app, in a transaction of its own."""
        with self.app.app_context():
            try:
                return transactions.write(work, *args)
            finally:
                db.session.remove()

    def user_id(self, email):
        return self.run(lambda: accounts.find_credentials(email).user_id)


TABLES = """
[tables.items]
select = "anon"
insert = "authenticated"
update = "owner"
delete = "owner"
owner_column = "user_id"

[tables.items.policies]
select = "price >= 0"

[buckets.avatars]
public = true
allowed_mime_types = ["image/*"]
"""


def make_server(tmp, **settings):
    """The app on a fresh SQLite file with tables.toml's `items` table and `avatars` bucket."""
    engine = sa.create_engine(f"sqlite:///{tmp}/dashboard.db")
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER, "
                "name VARCHAR(80) NOT NULL, price REAL, tags JSON)"
            )
        )
    engine.dispose()
    (tmp / "tables.toml").write_text(TABLES)
    return create_app(
        {
            "DATABASE_URL": f"sqlite:///{tmp}/dashboard.db",
            "JWT_SECRET": SECRET,
            "BCRYPT_ROUNDS": 4,
            "EMAIL_RATE_LIMIT": 0,
            "STORAGE_ROOT": str(tmp / "storage"),
            "BACKUP_TO": str(tmp / "backups"),
            "TABLES_CONFIG": str(tmp / "tables.toml"),
            **settings,
        }
    )


def sign_in(page, email=ADMIN, password=PASSWORD, path="/dashboard/"):
    page.goto(path)
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


AXE = None


def accessible(page):
    """axe-core's serious and critical violations on the page (none expected)."""
    global AXE
    if AXE is None:
        AXE = (JS_DIR / "node_modules" / "axe-core" / "axe.min.js").read_text()
    # Evaluated through the DevTools protocol, which the page's Content-Security-Policy does not
    # govern: no script tag is added to the page.
    page.evaluate(AXE)
    return page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .filter(v => v.impact === "serious" || v.impact === "critical")
            .map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target)}))"""
    )


def csrf_of(page):
    return page.locator("input[name=csrf]").first.get_attribute("value")


def expect_errors(context, count):
    """The console errors a test provoked on purpose (a refused request logs one): taken out, so that
    any other still fails it."""
    taken = context.errors[:count]
    del context.errors[:count]
    return taken
