"""/dashboard: the operator's screen. Server-rendered pages (templates/dashboard/), each view calling
the services the APIs call (dashboard/, auth/, rest/, storage/); plain forms, a few lines of script.

Who: an administrator's cookie (dashboard/sessions.py), HttpOnly and SameSite=Strict, Secure when the
request came over https. Every POST carries the session's CSRF token (the sign-in form a token of its
own cookie). Every answer carries a Content-Security-Policy that allows no inline script or style."""

import json
import secrets
from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, make_response, redirect, render_template, request, url_for

from auth import audit
from auth.administration import USER_ORDERS
from blueprints.schemas import AdminCreateSchema, AdminUserSchema, AuditPageSchema, PasswordGrantSchema, load
from config import ROOT
from dashboard import sessions, users
from errors import APIError
from extensions import client_ip

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
HALF_OPEN = {"dashboard.code", "dashboard.sign_out"}  # reached between the password and the code
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
}

NAV = [
    ("dashboard.users_page", "Users"),
    ("dashboard.tables_page", "Tables"),
    ("dashboard.storage_page", "Storage"),
    ("dashboard.audit_page", "Audit log"),
    ("dashboard.settings_page", "Settings"),
]
SECTIONS = {
    "audit": "Audit log",
    "table": "Tables",
    "storage": "Storage",
    "bucket": "Storage",
    "settings": "Settings",
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
    response.headers["Content-Security-Policy"] = CSP
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


# --- signing in and out


@bp.get("/")
def index():
    if g.admin is not None and g.admin.verified:
        return redirect(safe_next(request.args.get("next")), 303)
    if g.admin is not None:
        return page("code.html", next=request.args.get("next", ""))
    return sign_in_form()


def sign_in_form(status=200, error=None, email=""):
    token = secrets.token_urlsafe(24)
    response, status = page(
        "sign_in.html",
        status,
        error=error,
        email=email,
        form_token=token,
        next=request.values.get("next", ""),
    )
    response = make_response(response, status)
    response.set_cookie(
        SIGN_IN_COOKIE, token, httponly=True, samesite="Strict", secure=secure(), path="/dashboard"
    )
    return response


@bp.post("/sign-in")
def sign_in():
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    sent = request.form.get("csrf", "")
    if not expected or not secrets.compare_digest(expected.encode(), sent.encode()):
        return sign_in_form(403, "This form has expired: try again.")
    email = request.form.get("email", "")
    try:
        body = load(password_schema, {"email": email, "password": request.form.get("password", "")})
        token, needs_code = sessions.sign_in(body["email"], body["password"], client_ip())
    except APIError as error:
        return sign_in_form(error.status, error.message, email)
    target = (
        url_for(".index", next=request.form.get("next", ""))
        if needs_code
        else safe_next(request.form.get("next"))
    )
    response = redirect(target, 303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=secure(), path="/dashboard")
    response.delete_cookie(SIGN_IN_COOKIE, path="/dashboard")
    return response


@bp.post("/code")
def code():
    try:
        sessions.verify_code(g.admin, request.form.get("code", ""), client_ip())
    except APIError as error:
        return page("code.html", error.status, error=error.message, next=request.form.get("next", ""))
    return redirect(safe_next(request.form.get("next")), 303)


@bp.post("/sign-out")
def sign_out():
    sessions.sign_out(g.admin)
    response = redirect(url_for(".index"), 303)
    response.delete_cookie(COOKIE, path="/dashboard", httponly=True, samesite="Strict", secure=secure())
    return response


# --- users


@bp.get("/users")
def users_page():
    query = request.args.get("q", "").strip()[:200]
    order = request.args.get("sort", "newest")
    if order not in USER_ORDERS:
        order = "newest"
    number = load(audit_schema, {"page": request.args.get("page", "")})["page"]
    found, total = users.page(query, order, number, PER_PAGE)
    return page(
        "users.html", found=found, total=total, query=query, order=order, number=number,
        last=max(1, -(-total // PER_PAGE)),
    )  # fmt: skip


@bp.post("/users")
def create_user():
    fields = {"email": request.form.get("email", ""), "password": request.form.get("password", "")}
    user = users.create(load(create_schema, fields))
    return done(".user_page", "created", user_id=user["id"])


@bp.post("/users/invite")
def invite_user():
    body = load(password_schema, {"email": request.form.get("email", ""), "password": "-"})
    user = users.invite(body["email"])
    return done(".user_page", "invited", user_id=user["id"])


@bp.get("/users/<user_id:user_id>")
def user_page(user_id):
    user, factors, user_sessions = users.details(user_id)
    stored_app = {k: v for k, v in user["app_metadata"].items() if k not in users.COMPUTED_APP_METADATA}
    return page(
        "user.html",
        user=user,
        factors=factors,
        user_sessions=user_sessions,
        user_metadata=json.dumps(user["user_metadata"], indent=2, ensure_ascii=False),
        app_metadata=json.dumps(stored_app, indent=2, ensure_ascii=False),
        durations=BAN_DURATIONS,
    )


def json_object(name, label):
    try:
        value = json.loads(request.form.get(name, "") or "{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise APIError(400, "validation_failed", f"{label} must be a JSON object")
    return value


@bp.post("/users/<user_id:user_id>/metadata")
def save_metadata(user_id):
    user_metadata = json_object("user_metadata", "User metadata")
    app_metadata = json_object("app_metadata", "App metadata")
    load(update_schema, {"user_metadata": user_metadata, "app_metadata": app_metadata})
    users.edit_metadata(user_id, user_metadata, app_metadata)
    return done(".user_page", "saved", user_id=user_id)


@bp.post("/users/<user_id:user_id>/ban")
def ban(user_id):
    duration = request.form.get("duration", "")
    if duration not in BAN_DURATIONS:
        raise APIError(400, "validation_failed", "Choose how long the ban lasts")
    users.update(user_id, load(update_schema, {"ban_duration": duration}))
    return done(".user_page", "banned", user_id=user_id)


@bp.post("/users/<user_id:user_id>/unban")
def unban(user_id):
    users.update(user_id, load(update_schema, {"ban_duration": "none"}))
    return done(".user_page", "unbanned", user_id=user_id)


@bp.post("/users/<user_id:user_id>/sign-out")
def end_sessions(user_id):
    users.end_sessions(user_id)
    return done(".user_page", "signed-out", user_id=user_id)


@bp.post("/users/<user_id:user_id>/recovery")
def send_recovery(user_id):
    users.send_recovery(user_id)
    return done(".user_page", "recovery", user_id=user_id)


@bp.post("/users/<user_id:user_id>/magic-link")
def send_magic_link(user_id):
    users.send_magic_link(user_id)
    return done(".user_page", "magic-link", user_id=user_id)


@bp.post("/users/<user_id:user_id>/factors/<factor_id>/delete")
def remove_factor(user_id, factor_id):
    users.remove_factor(user_id, factor_id)
    return done(".user_page", "factor-removed", user_id=user_id)


@bp.get("/users/<user_id:user_id>/delete")
def confirm_delete(user_id):
    user = users.details(user_id)[0]
    return page("confirm_delete.html", user=user)


@bp.post("/users/<user_id:user_id>/delete")
def delete_user(user_id):
    users.delete(user_id)
    return done(".users_page", "deleted")


# --- the audit log


@bp.get("/audit")
def audit_page():
    args = load(audit_schema, {"page": request.args.get("page", ""), "q": request.args.get("q", "")[:200]})
    entries, total = users.read(audit.entries, args["page"], PER_PAGE, args["q"].strip())
    return page(
        "audit.html", entries=entries, total=total, query=args["q"], number=args["page"],
        last=max(1, -(-total // PER_PAGE)),
    )  # fmt: skip
