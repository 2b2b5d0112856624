"""/auth/v1: GoTrue's wire format over the existing users table."""

from flask import Blueprint, current_app, request

import accounts
import sessions
from accounts import string_id_for_sdks
from errors import APIError, Auth
from extensions import limiter
from gateway import requires_user
from schemas import (
    PasswordGrantSchema,
    RefreshGrantSchema,
    SignUpSchema,
    UserUpdateSchema,
    load,
)

bp = Blueprint("auth", __name__, url_prefix="/auth/v1")

signup_schema = SignUpSchema()
password_schema = PasswordGrantSchema()
refresh_schema = RefreshGrantSchema()
update_schema = UserUpdateSchema()


def session_with_string_id(session):
    return {**session, "user": string_id_for_sdks(session["user"])}


@bp.post("/signup")
@limiter.limit("30 per 5 minutes")
def signup():
    body = load(signup_schema)
    return session_with_string_id(accounts.sign_up(body["email"], body["password"], body["data"]))


@bp.post("/token")
@limiter.limit("150 per 5 minutes")
def token():
    grant = request.args.get("grant_type")
    if grant == "password":
        body = load(password_schema)
        return session_with_string_id(accounts.sign_in(body["email"], body["password"]))
    if grant == "refresh_token":
        body = load(refresh_schema)
        return session_with_string_id(sessions.refresh(body["refresh_token"]))
    raise APIError(400, Auth.UNSUPPORTED_GRANT_TYPE, "Unsupported grant_type: use password or refresh_token")


@bp.get("/user")
@requires_user
def get_user(who):
    return string_id_for_sdks(accounts.signed_in_user(who))


@bp.route("/user", methods=["PATCH", "PUT"])
@requires_user
def update_user(who):
    return string_id_for_sdks(accounts.update_user(who, load(update_schema)))


@bp.post("/logout")
@requires_user
def logout(who):
    sessions.sign_out(who, request.args.get("scope", "global"))
    return "", 204


@bp.get("/settings")
def settings():
    return {
        "disable_signup": current_app.config["DISABLE_SIGNUP"],
        "external": {"email": True},
        "mailer_autoconfirm": True,
    }
