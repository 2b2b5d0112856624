"""/auth/v1: GoTrue's wire format over the existing users table (SPEC §3)."""

from flask import Blueprint, current_app, request

import accounts
from errors import APIError, api_version
from extensions import limiter
from gateway import current_user_identity
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


def present(user):
    """Official clients (SPEC §6) want the id as a string."""
    return {**user, "id": str(user["id"])} if api_version() else user


def present_session(session):
    return {**session, "user": present(session["user"])}


@bp.post("/signup")
@limiter.limit("30 per 5 minutes")
def signup():
    body = load(signup_schema)
    return present_session(accounts.sign_up(body["email"], body["password"], body["data"]))


@bp.post("/token")
@limiter.limit("150 per 5 minutes")
def token():
    grant = request.args.get("grant_type")
    if grant == "password":
        body = load(password_schema)
        return present_session(accounts.sign_in(body["email"], body["password"]))
    if grant == "refresh_token":
        body = load(refresh_schema)
        return present_session(accounts.refresh(body["refresh_token"]))
    raise APIError(400, "unsupported_grant_type", "Unsupported grant_type: use password or refresh_token")


@bp.get("/user")
def get_user():
    return present(accounts.user_object(current_user_identity().user))


@bp.route("/user", methods=["PATCH", "PUT"])
def update_user():
    who = current_user_identity()
    return present(accounts.update_user(who, load(update_schema)))


@bp.post("/logout")
def logout():
    accounts.sign_out(current_user_identity(), request.args.get("scope", "global"))
    return "", 204


@bp.get("/settings")
def settings():
    return {
        "disable_signup": current_app.config["DISABLE_SIGNUP"],
        "external": {"email": True},
        "mailer_autoconfirm": True,
    }
