"""/auth/v1: GoTrue's wire format over the existing users table."""

import functools

from flask import Blueprint, current_app, redirect, request

from auth import (
    accounts,
    anonymous,
    emails,
    external,
    mfa,
    passkeys,
    pkce,
    providers,
    sessions,
    signins,
    signups,
    verification,
)
from blueprints.gateway import current_user_identity, require_service_role, requires_user
from blueprints.responses import session_for_sdks, string_id_for_sdks
from blueprints.schemas import (
    AnonymousSignUpSchema,
    EnrollFactorSchema,
    IdTokenGrantSchema,
    InviteSchema,
    OtpSchema,
    PasskeyRenameSchema,
    PasskeyVerifySchema,
    PasswordGrantSchema,
    PkceGrantSchema,
    RecoverSchema,
    RefreshGrantSchema,
    ResendSchema,
    SignUpSchema,
    UserUpdateSchema,
    VerifyFactorSchema,
    VerifySchema,
    json_body,
    load,
)
from errors import APIError, Auth, web3_disabled
from extensions import client_ip, limiter

bp = Blueprint("auth", __name__, url_prefix="/auth/v1")

signup_schema = SignUpSchema()
passkey_verify_schema = PasskeyVerifySchema()
passkey_rename_schema = PasskeyRenameSchema()
anonymous_schema = AnonymousSignUpSchema()
password_schema = PasswordGrantSchema()
refresh_schema = RefreshGrantSchema()
pkce_schema = PkceGrantSchema()
id_token_schema = IdTokenGrantSchema()
update_schema = UserUpdateSchema()
recover_schema = RecoverSchema()
otp_schema = OtpSchema()
resend_schema = ResendSchema()
verify_schema = VerifySchema()
invite_schema = InviteSchema()
enroll_schema = EnrollFactorSchema()
verify_factor_schema = VerifyFactorSchema()


@bp.post("/signup")
@limiter.limit("30 per 5 minutes")
def signup():
    if current_app.config["ANONYMOUS_USERS_ENABLED"] and SignUpSchema.is_anonymous(json_body()):
        anonymous.count_sign_up(client_ip())
        return session_for_sdks(anonymous.sign_up(load(anonymous_schema)["data"] or {}))
    body = load(signup_schema)
    if not current_app.config["MAILER_AUTOCONFIRM"]:
        if current_app.config["DISABLE_SIGNUP"]:
            raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
        user = emails.sign_up_unconfirmed(
            body["email"], body["password"], body["data"], redirect_to(), challenge(body)
        )
        return string_id_for_sdks(user)
    return session_for_sdks(signups.sign_up(body["email"], body["password"], body["data"]))


def redirect_to():
    """Where a mailed link should lead: the redirect_to query parameter (how the SDKs send it)."""
    return request.args.get("redirect_to") or None


def challenge(values):
    """The PKCE challenge a request starts its flow with, or None (see auth/pkce.py)."""
    return pkce.challenge(values.get("code_challenge"), values.get("code_challenge_method"))


@bp.post("/token")
@limiter.limit("150 per 5 minutes")
def token():
    grant = request.args.get("grant_type")
    if grant == "password":
        body = load(password_schema)
        return session_for_sdks(signins.sign_in(body["email"], body["password"], client_ip()))
    if grant == "refresh_token":
        body = load(refresh_schema)
        return session_for_sdks(sessions.refresh(body["refresh_token"]))
    if grant == "pkce":
        body = load(pkce_schema)
        return session_for_sdks(pkce.exchange(body["auth_code"], body["code_verifier"]))
    if grant == "id_token":
        body = load(id_token_schema)
        if body["link_identity"]:
            check_manual_linking()  # linking with a token is manual linking too
        linking = current_user_identity().user_id if body["link_identity"] else None
        return session_for_sdks(
            external.sign_in_with_id_token(body["provider"], body["id_token"], body["nonce"], linking)
        )
    if grant == "web3":
        raise web3_disabled()
    raise APIError(
        400,
        Auth.UNSUPPORTED_GRANT_TYPE,
        "Unsupported grant_type: use password, refresh_token, pkce or id_token",
    )


@bp.get("/user")
@requires_user
def get_user(who):
    return string_id_for_sdks(accounts.signed_in_user(who))


@bp.route("/user", methods=["PATCH", "PUT"])
@requires_user
def update_user(who):
    return string_id_for_sdks(emails.update_user(who, load(update_schema), redirect_to()))


@bp.get("/reauthenticate")
@limiter.limit("30 per 5 minutes")
@requires_user
def reauthenticate(who):
    return emails.reauthenticate(who)


@bp.post("/logout")
@requires_user
def logout(who):
    sessions.sign_out(who, request.args.get("scope", "global"))
    return "", 204


@bp.get("/.well-known/jwks.json")
def jwks():
    """The public signing keys, for verifying access tokens without a round trip (getClaims());
    cached as GoTrue lets them be, so a rotation reaches verifiers within ten minutes."""
    return current_app.config["JWT_KEYS"].jwks(), {"Cache-Control": "public, max-age=600"}


@bp.get("/settings")
def settings():
    return {
        "disable_signup": current_app.config["DISABLE_SIGNUP"],
        "external": {"email": True, **dict.fromkeys(providers.enabled(), True)},
        "mailer_autoconfirm": current_app.config["MAILER_AUTOCONFIRM"],
    }


# --- e-mail: recovery, magic links and codes, confirmation (emails.py)


@bp.post("/recover")
@limiter.limit("30 per 5 minutes")
def recover():
    body = load(recover_schema)
    return emails.recover(body["email"], redirect_to(), challenge(body))


@bp.post("/otp")
@limiter.limit("30 per 5 minutes")
def otp():
    body = load(otp_schema)
    return emails.magic_link(body["email"], body["create_user"], body["data"], redirect_to(), challenge(body))


@bp.post("/resend")
@limiter.limit("30 per 5 minutes")
def resend():
    body = load(resend_schema)
    return emails.resend(body["type"], body["email"], redirect_to(), challenge(body))


@bp.post("/verify")
@limiter.limit("150 per 5 minutes")
def verify():
    body = load(verify_schema)
    session = verification.verify(body["type"], body.get("token_hash"), body.get("email"), body.get("token"))
    return session_for_sdks(session)


@bp.get("/verify")
@limiter.limit("150 per 5 minutes")
def follow_link():
    """The link in a mail: a 303 to redirect_to with the session, or the error, in the fragment."""
    kind, token = request.args.get("type", ""), request.args.get("token", "")
    return redirect(verification.redirect_after_verify(kind, token, redirect_to()), code=303)


@bp.post("/invite")
def invite():
    require_service_role()
    body = load(invite_schema)
    return string_id_for_sdks(emails.invite(body["email"], body.get("data"), redirect_to()))


# --- a second factor: TOTP (mfa.py)


def requires_registered_user(view):
    """requires_user, refusing anonymous users as GoTrue does (its requireNotAnonymous)."""

    @requires_user
    @functools.wraps(view)
    def wrapped(who, **kwargs):
        anonymous.refuse(who)
        return view(who=who, **kwargs)

    return wrapped


@bp.post("/factors")
@requires_registered_user
def enroll_factor(who):
    body = load(enroll_schema)
    return mfa.enroll(who, body["factor_type"], body["friendly_name"], body["issuer"])


@bp.post("/factors/<factor_id>/challenge")
@limiter.limit("30 per 5 minutes")
@requires_registered_user
def challenge_factor(who, factor_id):
    return mfa.challenge(who, factor_id, client_ip())


@bp.post("/factors/<factor_id>/verify")
@limiter.limit("30 per 5 minutes")
@requires_registered_user
def verify_factor(who, factor_id):
    body = load(verify_factor_schema)
    answer = body["code"], client_ip(), body["webauthn"]
    return session_for_sdks(mfa.verify(who, factor_id, body["challenge_id"], *answer))


@bp.delete("/factors/<factor_id>")
@requires_registered_user
def unenroll_factor(who, factor_id):
    return mfa.unenroll(who, factor_id)


# --- passkeys (passkeys.py)


def passkeys_enabled(view):
    """GoTrue's 404 passkey_disabled while PASSKEY_ENABLED is off, before anything else."""

    @functools.wraps(view)
    def wrapped(**kwargs):
        if not current_app.config["PASSKEY_ENABLED"]:
            raise passkeys.disabled()
        return view(**kwargs)

    return wrapped


def passkey_limit():
    return f"{current_app.config['RATE_LIMIT_PASSKEY']} per 5 minutes"


@bp.post("/passkeys/registration/options")
@passkeys_enabled
@requires_registered_user
def passkey_registration_options(who):
    return passkeys.registration_options(who)


@bp.post("/passkeys/registration/verify")
@passkeys_enabled
@limiter.limit(passkey_limit)
@requires_registered_user
def passkey_registration_verify(who):
    body = load(passkey_verify_schema)
    return passkeys.registration_verify(who, body["challenge_id"], body["credential"])


@bp.post("/passkeys/authentication/options")
@passkeys_enabled
@limiter.limit(passkey_limit)
def passkey_authentication_options():
    return passkeys.authentication_options(client_ip())


@bp.post("/passkeys/authentication/verify")
@passkeys_enabled
@limiter.limit(passkey_limit)
def passkey_authentication_verify():
    body = load(passkey_verify_schema)
    return session_for_sdks(passkeys.authentication_verify(body["challenge_id"], body["credential"]))


@bp.get("/passkeys")
@passkeys_enabled
@requires_user
def list_passkeys(who):
    return passkeys.list_passkeys(who.user_id)


@bp.patch("/passkeys/<passkey_id>")
@passkeys_enabled
@requires_user
def rename_passkey(who, passkey_id):
    return passkeys.rename(who, passkey_id, load(passkey_rename_schema)["friendly_name"])


@bp.delete("/passkeys/<passkey_id>")
@passkeys_enabled
@requires_user
def delete_passkey(who, passkey_id):
    passkeys.remove(who, passkey_id)
    return "", 204


# --- third-party sign-in (external.py) and PKCE (pkce.py)


@bp.get("/authorize")
@limiter.limit("30 per 5 minutes")
def authorize():
    """The browser's way to a provider's sign-in page (no API key: it is a link)."""
    args = request.args
    url = external.authorize_in_browser(
        args.get("provider", ""), redirect_to(), args.get("scopes"), challenge(args)
    )
    return redirect(url, code=302)


@bp.get("/callback")
@limiter.limit("150 per 5 minutes")
def callback():
    """Where the provider sends the browser back: a 302 to the app, whatever happened."""
    args = request.args
    url = external.callback(
        args.get("state"), args.get("code"), args.get("error"), args.get("error_description")
    )
    return redirect(url, code=302)


def manual_linking(view):
    """GoTrue's refusal, before anything else is looked at, while SECURITY_MANUAL_LINKING_ENABLED is off."""

    @functools.wraps(view)
    def wrapped(**kwargs):
        check_manual_linking()
        return view(**kwargs)

    return wrapped


def check_manual_linking():
    if not current_app.config["SECURITY_MANUAL_LINKING_ENABLED"]:
        raise APIError(404, Auth.MANUAL_LINKING_DISABLED, "Manual linking is disabled")


@bp.get("/user/identities/authorize")
@manual_linking
@requires_user
def link_identity(who):
    """Link a provider's account to the signed-in user: supabase-js asks for the URL as JSON."""
    args = request.args
    url = external.authorize(
        args.get("provider", ""), redirect_to(), args.get("scopes"), challenge(args), link_user_id=who.user_id
    )
    if args.get("skip_http_redirect") == "true":
        return {"url": url}
    return redirect(url, code=302)


@bp.delete("/user/identities/<identity_id>")
@manual_linking
@requires_user
def unlink_identity(who, identity_id):
    return string_id_for_sdks(external.unlink(who, identity_id))
