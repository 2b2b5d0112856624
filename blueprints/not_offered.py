"""GoTrue's routes for what minibase does not offer: SAML single sign-on and the OAuth 2.1 server
(minibase is no identity provider for other apps). Each answers GoTrue's own error for the feature
switched off, so that an app, or supabase-js, shows the message it was written for."""

from flask import Blueprint

from blueprints.gateway import require_service_role
from errors import oauth_server_disabled, saml_disabled

bp = Blueprint("not_offered", __name__, url_prefix="/auth/v1")
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@bp.route("/sso", methods=METHODS)
@bp.route("/sso/<path:rest>", methods=METHODS)
def single_sign_on(rest=None):
    """signInWithSSO(), and the SAML metadata and assertion endpoints."""
    raise saml_disabled()


@bp.route("/admin/sso", methods=METHODS)
@bp.route("/admin/sso/<path:rest>", methods=METHODS)
def sso_providers(rest=None):
    require_service_role()
    raise saml_disabled()


@bp.route("/oauth/<path:rest>", methods=METHODS)
@bp.route("/user/oauth/<path:rest>", methods=METHODS)
@bp.route("/.well-known/oauth-authorization-server", methods=METHODS)
def oauth_server(rest=None):
    """The OAuth server's authorize, token, userinfo, consent, client registration and grants."""
    raise oauth_server_disabled()


@bp.route("/admin/oauth/<path:rest>", methods=METHODS)
def oauth_clients(rest=None):
    require_service_role()
    raise oauth_server_disabled()
