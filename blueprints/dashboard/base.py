"""/dashboard: the operator's screen. Server-rendered pages (templates/dashboard/), each view calling
the services the APIs call (dashboard/, auth/, rest/, storage/); plain forms, a few lines of script.

Who: an administrator's cookie (dashboard/sessions.py), HttpOnly and SameSite=Strict, Secure when the
request came over https. Every POST carries the session's CSRF token (the sign-in form a token of its
own cookie). Every answer carries a Content-Security-Policy that allows no inline script or style."""

from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, redirect, render_template, request, url_for

from auth import audit
from blueprints.schemas import AdminCreateSchema, AdminUserSchema, AuditPageSchema, PasswordGrantSchema, load
from blueprints.storage import MULTIPART_OVERHEAD
from config import ROOT, setting
from dashboard import sessions
from errors import APIError

bp = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    static_folder=str(ROOT / "static" / "dashboard"),
    static_url_path="/static",
)

COOKIE = "minibase_dashboard"
SIGN_IN_COOKIE = "minibase_dashboard_sign_in"  # the sign-in form's CSRF token
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
OPEN = {"dashboard.index", "dashboard.sign_in", "dashboard.static"}  # reached without a session
# reached between the password and the second factor
HALF_OPEN = {"dashboard.code", "dashboard.key_options", "dashboard.key", "dashboard.sign_out"}
PER_PAGE = 25
BAN_DURATIONS = {
    "1h": "1 hour",
    "24h": "24 hours",
    "168h": "7 days",
    "720h": "30 days",
    "876000h": "100 years",
}
NOTICES = {
    "created": "User created.",
    "invited": "Invitation sent.",
    "saved": "Metadata saved.",
    "banned": "User banned.",
    "unbanned": "Ban lifted.",
    "signed-out": "Every session of the user has ended.",
    "recovery": "Recovery link sent.",
    "magic-link": "Magic link sent.",
    "factor-removed": "Factor removed.",
    "deleted": "User deleted.",
    "row-inserted": "Row inserted.",
    "row-saved": "Row saved.",
    "row-deleted": "Row deleted.",
    "bucket-created": "Bucket created.",
    "bucket-saved": "Bucket saved.",
    "bucket-emptied": "Bucket emptied.",
    "bucket-deleted": "Bucket deleted.",
    "uploaded": "File uploaded.",
    "moved": "File moved.",
    "file-deleted": "File deleted.",
    "backup-started": "A backup is being made.",
    "backup-running": "A backup is being made already.",
    "resent": "The delivery is queued to be sent again.",
}

NAV = [
    ("dashboard.users_page", "Users"),
    ("dashboard.tables_page", "Tables"),
    ("dashboard.storage_page", "Storage"),
    ("dashboard.functions_page", "Functions"),
    ("dashboard.webhooks_page", "Webhooks"),
    ("dashboard.audit_page", "Audit log"),
    ("dashboard.backups_page", "Backups"),
    ("dashboard.settings_page", "Settings"),
]
SECTIONS = {
    "audit": "Audit log",
    "webhooks": "Webhooks",
    "resend": "Webhooks",
    "table": "Tables",
    "storage": "Storage",
    "bucket": "Storage",
    "settings": "Settings",
    "backup": "Backups",
    "functions": "Functions",
}

password_schema = PasswordGrantSchema()
create_schema = AdminCreateSchema()
update_schema = AdminUserSchema()
audit_schema = AuditPageSchema()


# --- every request


@bp.before_request
def require_admin():
    """The signed-in administrator (g.admin), or the sign-in page; a POST without the session's CSRF
    token is a 403."""
    if request.endpoint == "dashboard.upload":  # a file, not a JSON body: Storage's own limit
        request.max_content_length = setting("STORAGE_FILE_SIZE_LIMIT") + MULTIPART_OVERHEAD
    g.admin = sessions.current(request.cookies.get(COOKIE))
    if g.admin is not None:
        audit.acting(g.admin.email, g.admin.user_id)
    if request.endpoint in OPEN:
        return None
    if g.admin is None or (not g.admin.verified and request.endpoint not in HALF_OPEN):
        if request.method != "GET":
            return page("error.html", 401, message="Sign in first.")
        return redirect(url_for(".index", next=request.full_path.rstrip("?")), 303)
    if request.method == "POST" and not sessions.csrf_matches(g.admin, request.form.get("csrf")):
        return page("error.html", 403, message="This form has expired: reload the page and try again.")
    return None


@bp.after_request
def guard(response):
    response.headers.setdefault("Content-Security-Policy", CSP)  # a served file keeps its sandbox
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    if request.endpoint != "dashboard.static":
        response.headers["Cache-Control"] = "no-store"
    return response


@bp.context_processor
def navigation():
    """The navigation's links, and which of them is the current page's section."""
    name = (request.endpoint or "").partition(".")[2]
    section = next((label for prefix, label in SECTIONS.items() if name.startswith(prefix)), "Users")
    return {"nav": [(endpoint, label) for endpoint, label in NAV if endpoint in current_app.view_functions],
            "section": section}  # fmt: skip


@bp.errorhandler(APIError)
def refused(error):
    """A service's refusal, shown on a page of its own with the API's message."""
    return page("error.html", error.status if 400 <= error.status < 600 else 400, message=error.message)


def page(template, status=200, **context):
    notice = NOTICES.get(request.args.get("notice", ""))
    return render_template(f"dashboard/{template}", admin=g.get("admin"), notice=notice, **context), status


def page_number():
    """?page=, a positive integer (1 when absent); a 400 otherwise."""
    return load(audit_schema, {"page": request.args.get("page", "")})["page"]


def done(endpoint, notice, **values):
    return redirect(url_for(endpoint, notice=notice, **values), 303)


def secure():
    return request.scheme == "https"  # as ProxyFix gives it behind TRUSTED_PROXIES


def safe_next(value):
    """Where to go after signing in: a dashboard page of this origin, never elsewhere."""
    fallback = url_for(".users_page")
    if not value or not value.startswith("/dashboard/") or "\\" in value:
        return fallback
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or any(ord(char) < 0x21 for char in value):
        return fallback
    return value
