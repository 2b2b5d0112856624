"""What the dashboard tests do on a page: sign in, check it with axe-core, read its CSRF token."""

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ADMIN, PASSWORD = "boss@example.com", "boss-password"
JS_DIR = Path(__file__).resolve().parent.parent / "js"


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
