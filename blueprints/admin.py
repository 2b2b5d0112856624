"""/auth/v1/admin: GoTrue's user administration, for the service_role key only."""

from flask import Blueprint, request
from werkzeug.routing import BaseConverter

from auth import administration, audit, emails, mfa, passkeys
from blueprints.gateway import require_service_role
from blueprints.responses import string_id_for_sdks
from blueprints.schemas import (
    AdminCreateSchema,
    AdminUserSchema,
    AuditPageSchema,
    GenerateLinkSchema,
    PageSchema,
    load,
)

bp = Blueprint("admin", __name__, url_prefix="/auth/v1/admin")


class UserIdConverter(BaseConverter):
    """A user id in a path: the integer, or the UUID form the official SDKs insist on
    (00000000-0000-0000-0000-000000000042). Anything else, or an id too large for a database
    integer, matches no route: a 404."""

    regex = r"[0-9]{1,18}|00000000-0000-0000-0000-[0-9]{12}"

    def to_python(self, value):
        return int(value.rpartition("-")[2])

    def to_url(self, value):
        return str(value)


@bp.record_once
def register_converter(state):
    state.app.url_map.converters["user_id"] = UserIdConverter


create_schema = AdminCreateSchema()
update_schema = AdminUserSchema()
page_schema = PageSchema()
link_schema = GenerateLinkSchema()
audit_schema = AuditPageSchema()


bp.before_request(require_service_role)


@bp.get("/users")
def list_users():
    page = load(page_schema, request.args.to_dict())
    users, total = administration.admin_list_users(page["page"], page["per_page"])
    body = {"users": [string_id_for_sdks(user) for user in users], "aud": "authenticated"}
    return body, {"X-Total-Count": str(total), "Link": pages_link(page["page"], page["per_page"], total)}


@bp.get("/audit")
def audit_log():
    """The audit log, newest first: `q` finds entries whose actor, action, target or IP contains it."""
    page = load(audit_schema, request.args.to_dict())
    entries, total = audit.entries(page["page"], page["per_page"], page["q"])
    return {"entries": entries}, {
        "X-Total-Count": str(total),
        "Link": pages_link(page["page"], page["per_page"], total),
    }


def pages_link(page, per_page, total):
    """GoTrue's Link header: the next page while there is one, and the last. supabase-js reads its
    pagination (and, through it, the total) from here."""
    last = max(1, -(-total // per_page))
    links = []
    if page < last:
        links.append(f'<{request.path}?page={page + 1}&per_page={per_page}>; rel="next"')
    links.append(f'<{request.path}?page={last}&per_page={per_page}>; rel="last"')
    return ", ".join(links)


@bp.post("/users")
def create_user():
    return string_id_for_sdks(administration.admin_create_user(load(create_schema)))


@bp.get("/users/<user_id:user_id>")
def get_user(user_id):
    return string_id_for_sdks(administration.admin_get_user(user_id))


@bp.put("/users/<user_id:user_id>")
def update_user(user_id):
    return string_id_for_sdks(administration.admin_update_user(user_id, load(update_schema)))


@bp.delete("/users/<user_id:user_id>")
def delete_user(user_id):
    administration.admin_delete_user(user_id)
    return {}


@bp.post("/generate_link")
def generate_link():
    """A sign-up, invite, magic link, recovery or address-change link and code, returned instead
    of mailed."""
    body = load(link_schema)
    redirect = body.get("redirect_to") or request.args.get("redirect_to")
    found = emails.generate_link(
        body["type"], body["email"], body.get("password"), body.get("data"), redirect, body.get("new_email")
    )
    return string_id_for_sdks(found)


@bp.get("/users/<user_id:user_id>/factors")
def list_factors(user_id):
    return mfa.admin_list_factors(user_id)


@bp.delete("/users/<user_id:user_id>/factors/<factor_id>")
def delete_factor(user_id, factor_id):
    return mfa.admin_delete_factor(user_id, factor_id)


@bp.get("/users/<user_id:user_id>/passkeys")
def list_passkeys(user_id):
    return passkeys.admin_list(user_id)


@bp.delete("/users/<user_id:user_id>/passkeys/<passkey_id>")
def delete_passkey(user_id, passkey_id):
    passkeys.admin_remove(user_id, passkey_id)
    return "", 204
