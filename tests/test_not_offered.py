"""What minibase does not offer (phone sign-in, SAML SSO, Web3, anonymous sign-ins, phone and WebAuthn
factors, the OAuth server) answers GoTrue's own "disabled" errors and texts, over HTTP and through
supabase-js, so that apps show the message they were written for."""

import pytest

from support import Api, SupabaseJs, assert_auth_error, serve_app

PHONE = "+15555550123"
# (method, path, body, status, error_code, message): GoTrue's, from its source.
REFUSED = [
    ("POST", "/auth/v1/signup", {}, 422, "anonymous_provider_disabled", "Anonymous sign-ins are disabled"),
    (
        "POST",
        "/auth/v1/signup",
        {"data": {}, "gotrue_meta_security": {}},
        422,
        "anonymous_provider_disabled",
        "Anonymous sign-ins are disabled",
    ),
    (
        "POST",
        "/auth/v1/signup",
        {"email": "", "phone": None},
        422,
        "anonymous_provider_disabled",
        "Anonymous sign-ins are disabled",
    ),
    (
        "POST",
        "/auth/v1/signup",
        {"phone": PHONE, "password": "secret-pw"},
        400,
        "phone_provider_disabled",
        "Phone signups are disabled",
    ),
    (
        "POST",
        "/auth/v1/token?grant_type=password",
        {"phone": PHONE, "password": "secret-pw"},
        422,
        "phone_provider_disabled",
        "Phone logins are disabled",
    ),
    (
        "POST",
        "/auth/v1/token?grant_type=web3",
        {"chain": "ethereum", "message": "m", "signature": "s"},
        422,
        "web3_provider_disabled",
        "Web3 provider is disabled",
    ),
    ("POST", "/auth/v1/otp", {"phone": PHONE}, 400, "phone_provider_disabled", "Unsupported phone provider"),
    (
        "POST",
        "/auth/v1/resend",
        {"type": "sms", "phone": PHONE},
        400,
        "phone_provider_disabled",
        "Phone logins are disabled",
    ),
    (
        "POST",
        "/auth/v1/resend",
        {"type": "sms"},
        400,
        "validation_failed",
        "Type provided requires a phone number",
    ),
    (
        "POST",
        "/auth/v1/verify",
        {"type": "sms", "phone": PHONE, "token": "123456"},
        403,
        "otp_expired",
        "Token has expired or is invalid",
    ),
    (
        "POST",
        "/auth/v1/verify",
        {"type": "sms", "phone": f"{PHONE}-invalid", "token": "123456"},
        400,
        "validation_failed",
        "Invalid phone number format (E.164 required)",
    ),
    (
        "POST",
        "/auth/v1/verify",
        {"type": "phone_change", "phone": PHONE, "token": "123456"},
        403,
        "otp_expired",
        "Token has expired or is invalid",
    ),
    (
        "POST",
        "/auth/v1/sso",
        {"domain": "example.com"},
        404,
        "saml_provider_disabled",
        "SAML 2.0 is disabled",
    ),
    ("GET", "/auth/v1/sso/saml/metadata", None, 404, "saml_provider_disabled", "SAML 2.0 is disabled"),
    ("POST", "/auth/v1/sso/saml/acs", None, 404, "saml_provider_disabled", "SAML 2.0 is disabled"),
    (
        "GET",
        "/auth/v1/oauth/authorize?client_id=x",
        None,
        404,
        "feature_disabled",
        "OAuth server is disabled",
    ),
    (
        "POST",
        "/auth/v1/oauth/token",
        {"grant_type": "authorization_code"},
        404,
        "feature_disabled",
        "OAuth server is disabled",
    ),
    (
        "POST",
        "/auth/v1/oauth/clients/register",
        {"client_name": "x"},
        404,
        "feature_disabled",
        "OAuth server is disabled",
    ),
    ("GET", "/auth/v1/oauth/userinfo", None, 404, "feature_disabled", "OAuth server is disabled"),
    (
        "GET",
        "/auth/v1/.well-known/oauth-authorization-server",
        None,
        404,
        "feature_disabled",
        "OAuth server is disabled",
    ),
]
# Still what they were: a password without an email names the email, as §3.4 says.
UNCHANGED = [
    ("POST", "/auth/v1/signup", {"password": "secret-pw"}, 400, "validation_failed"),
    ("POST", "/auth/v1/token?grant_type=password", {"password": "secret-pw"}, 400, "validation_failed"),
    ("POST", "/auth/v1/otp", {}, 400, "validation_failed"),
    ("POST", "/auth/v1/token?grant_type=nonsense", {}, 400, "unsupported_grant_type"),
]


def test_what_is_not_offered_answers_gotrues_disabled_errors(api, service_key):
    for method, path, body, status, code, message in REFUSED:
        response = api.request(method, path, json=body)
        assert_auth_error(response, status, code)
        assert response.json["msg"] == message, (path, body)
    for method, path, body, status, code in UNCHANGED:
        response = api.request(method, path, json=body)
        assert_auth_error(response, status, code)
    assert "email" in api.post("/auth/v1/signup", json={"password": "secret-pw"}).json["msg"]
    # The disabled routes still stand behind the API key, and the admin ones behind the service key.
    assert api.client.post("/auth/v1/sso", json={}).status_code == 401
    for path in ("/auth/v1/admin/sso/providers", "/auth/v1/admin/oauth/clients"):
        assert_auth_error(api.get(path), 403, "not_admin")
    assert_auth_error(
        api.get("/auth/v1/admin/sso/providers", headers={"apikey": service_key}),
        404,
        "saml_provider_disabled",
    )
    assert_auth_error(
        api.get("/auth/v1/admin/oauth/clients", headers={"apikey": service_key}), 404, "feature_disabled"
    )


def test_phone_and_webauthn_factors_are_not_enrolled(api):
    token = api.sign_up()["access_token"]
    phone = api.post("/auth/v1/factors", token=token, json={"factor_type": "phone", "phone": PHONE})
    assert_auth_error(phone, 422, "mfa_phone_enroll_not_enabled")
    assert phone.json["msg"] == "MFA enroll is disabled for Phone"
    webauthn = api.post("/auth/v1/factors", token=token, json={"factor_type": "webauthn"})
    assert_auth_error(webauthn, 422, "mfa_webauthn_enroll_not_enabled")
    assert webauthn.json["msg"] == "MFA enroll is disabled for WebAuthn"
    # A user's phone in an update stays ignored; a TOTP factor still enrolls.
    assert api.put("/auth/v1/user", token=token, json={"phone": PHONE}).status_code == 200
    assert api.post("/auth/v1/factors", token=token, json={"factor_type": "totp"}).status_code == 200


def test_linking_is_refused_before_anything_else_while_manual_linking_is_off(api, make_app, anon_key):
    """GoTrue's SECURITY_MANUAL_LINKING_ENABLED, off by default: linkIdentity and unlinkIdentity are
    refused before the bearer or the provider is looked at; on, the same requests reach those checks."""
    token = api.sign_up()["access_token"]
    link, unlink = "/auth/v1/user/identities/authorize?provider=github", "/auth/v1/user/identities/x"
    for bearer in (token, None, "not-a-token"):
        for method, path in (("GET", link), ("DELETE", unlink)):
            refused = api.request(method, path, token=bearer)
            assert_auth_error(refused, 404, "manual_linking_disabled")
            assert refused.json["msg"] == "Manual linking is disabled"
    # Linking with an ID token (signInWithIdToken's linkIdentity) is manual linking too.
    by_token = {"provider": "google", "id_token": "a.b.c", "link_identity": True}
    id_token = "/auth/v1/token?grant_type=id_token"
    assert_auth_error(api.post(id_token, token=token, json=by_token), 404, "manual_linking_disabled")
    enabled = Api(make_app(SECURITY_MANUAL_LINKING_ENABLED=True), anon_key)
    reached = enabled.post(id_token, token=token, json=by_token)
    assert reached.status_code == 400 and reached.json["error_code"] != "manual_linking_disabled"
    assert_auth_error(enabled.get(link), 401, "no_authorization")
    assert_auth_error(enabled.get(link, token=token), 400, "validation_failed")  # github is not set up
    assert_auth_error(enabled.delete(unlink, token=token), 422, "identity_not_found")


@pytest.fixture
def served(app):
    base, stop = serve_app(app)
    yield base
    stop()


def test_supabase_js_shows_gotrues_messages(served, anon_key, node_modules):
    calls = [
        ("auth.signInAnonymously", [], "anonymous_provider_disabled", "Anonymous sign-ins are disabled"),
        (
            "auth.signUp",
            [{"phone": PHONE, "password": "secret-pw"}],
            "phone_provider_disabled",
            "Phone signups are disabled",
        ),
        (
            "auth.signInWithPassword",
            [{"phone": PHONE, "password": "secret-pw"}],
            "phone_provider_disabled",
            "Phone logins are disabled",
        ),
        ("auth.signInWithOtp", [{"phone": PHONE}], "phone_provider_disabled", "Unsupported phone provider"),
        (
            "auth.verifyOtp",
            [{"phone": PHONE, "token": "123456", "type": "sms"}],
            "otp_expired",
            "Token has expired or is invalid",
        ),
        (
            "auth.resend",
            [{"type": "sms", "phone": PHONE}],
            "phone_provider_disabled",
            "Phone logins are disabled",
        ),
        ("auth.signInWithSSO", [{"domain": "example.com"}], "saml_provider_disabled", "SAML 2.0 is disabled"),
    ]
    with SupabaseJs(served, anon_key) as js:
        for call, args, code, message in calls:
            answer = js("app", call, *args)
            assert answer["error"] is not None, call
            assert (answer["error"]["code"], answer["error"]["message"]) == (code, message), call
        js("user", "auth.signUp", {"email": "js@example.com", "password": "secret-pw"})
        enrolled = js("user", "auth.mfa.enroll", {"factorType": "phone", "phone": PHONE})
        assert enrolled["error"]["code"] == "mfa_phone_enroll_not_enabled"
        details = js("user", "auth.oauth.getAuthorizationDetails", "00000000-0000-0000-0000-000000000001")
        assert (details["error"]["code"], details["error"]["message"]) == (
            "feature_disabled",
            "OAuth server is disabled",
        )
