"""The dashboard's sign-in, Users and Audit log pages."""

import json
import secrets

from flask import g, make_response, redirect, request, url_for

from auth import audit
from auth.administration import USER_ORDERS
from blueprints.dashboard.base import (
    BAN_DURATIONS,
    COOKIE,
    PER_PAGE,
    SIGN_IN_COOKIE,
    audit_schema,
    bp,
    create_schema,
    done,
    page,
    page_number,
    password_schema,
    safe_next,
    secure,
    update_schema,
)
from blueprints.schemas import load
from dashboard import sessions, users
from errors import APIError
from extensions import client_ip, limiter

# --- signing in and out


@bp.get("/")
def index():
    if g.admin is not None and g.admin.verified:
        return redirect(safe_next(request.args.get("next")), 303)
    if g.admin is not None:
        return code_page(200, None, request.args.get("next", ""))
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
@limiter.limit("150 per 5 minutes")  # the auth API's token endpoint's limit, per client IP
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
@limiter.limit("150 per 5 minutes")
def code():
    try:
        sessions.verify_code(g.admin, request.form.get("code", ""), client_ip())
    except APIError as error:
        return code_page(error.status, error.message, request.form.get("next", ""))
    return redirect(safe_next(request.form.get("next")), 303)


@bp.post("/key/options")
@limiter.limit("150 per 5 minutes")
def key_options():
    try:
        return sessions.key_options(g.admin, client_ip())
    except APIError as error:
        return {"error": error.message}, error.status


@bp.post("/key")
@limiter.limit("150 per 5 minutes")
def key():
    """The security key's answer (the browser's credential JSON, as a form field beside the CSRF
    token): where to go next, or the refusal's message."""
    try:
        credential = json.loads(request.form.get("credential", ""))
    except ValueError:
        credential = None
    if not isinstance(credential, dict):
        return {"error": "The security key's answer is missing."}, 400
    form = request.form
    try:
        sessions.verify_key(
            g.admin, form.get("factor_id", ""), form.get("challenge_id", ""), credential, client_ip()
        )
    except APIError as error:
        return {"error": error.message}, error.status
    return {"next": safe_next(form.get("next"))}


def code_page(status, error, next_page):
    """The second step: the code form for a TOTP factor, the security key button for a WebAuthn one."""
    codes, keys = sessions.second_steps(g.admin)
    return page("code.html", status, error=error, next=next_page, codes=codes, keys=keys)


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
    number = page_number()
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
    user, factors, user_sessions, user_passkeys = users.details(user_id)
    stored_app = {k: v for k, v in user["app_metadata"].items() if k not in users.COMPUTED_APP_METADATA}
    return page(
        "user.html",
        user=user,
        factors=factors,
        user_sessions=user_sessions,
        user_passkeys=user_passkeys,
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
