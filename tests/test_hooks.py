"""Auth hooks over HTTP against a real hook server in this process (http.server on 127.0.0.1), which
verifies each call's Standard Webhooks signature with the standardwebhooks library: the five hooks,
and hooks that fail, time out, answer garbage or strip a claim, each refusing what it was asked
about. On both databases."""

import base64
import json
import time

import jwt
import pyotp
import pytest

from auth import hooks
from config import flask_settings, from_environment
from hook_server import HOOK_SECRET, HookServer
from support import SECRET, Api, assert_auth_error, free_port
from variables import ConfigError

OTHER_SECRET = "v1,whsec_" + base64.b64encode(b"o" * 32).decode()


@pytest.fixture
def hook():
    server = HookServer()
    yield server
    server.stop()


@pytest.fixture
def hooked(make_app, anon_key, hook):
    """A function: an Api whose app calls `hook` for the named hooks."""

    def build(*names, secrets=HOOK_SECRET, **settings):
        for name in names:
            prefix = f"HOOK_{name.upper()}"
            settings.update(
                {f"{prefix}_ENABLED": True, f"{prefix}_URI": hook.url, f"{prefix}_SECRETS": secrets}
            )
        return Api(make_app(**settings), anon_key)

    return build


def claims_of(token):
    return jwt.decode(token, SECRET, algorithms=["HS256"], audience="authenticated")


# --- custom_access_token


def add_claims(payload):
    claims = {
        **payload["claims"],
        "user_role": "editor",
        "app_metadata": {**payload["claims"]["app_metadata"], "team": 7},
    }
    return 200, "application/json", json.dumps({"claims": claims}).encode()


def test_custom_access_token_adds_claims_to_the_signed_token(hooked, hook):
    api = hooked("custom_access_token", secrets=f"{OTHER_SECRET}|{HOOK_SECRET}")
    hook.answer = add_claims
    session = api.sign_up()
    claims = claims_of(session["access_token"])
    assert claims["user_role"] == "editor" and claims["app_metadata"]["team"] == 7
    assert api.get("/auth/v1/user", token=session["access_token"]).status_code == 200
    (call,) = hook.calls
    assert call["verified"]  # signed with every secret: the hook's own verifies
    assert call["payload"]["user_id"] == "1" and call["payload"]["authentication_method"] == "password"
    assert call["payload"]["metadata"]["name"] == "customize-access-token"
    assert call["payload"]["claims"]["session_id"] == claims["session_id"]
    assert len(call["headers"]["webhook-signature"].split(" ")) == 2
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert claims_of(refreshed.json["access_token"])["user_role"] == "editor"
    assert hook.calls[-1]["payload"]["authentication_method"] == "token_refresh"


def strip(claim):
    def answer(payload):
        claims = {key: value for key, value in payload["claims"].items() if key != claim}
        return 200, "application/json", json.dumps({"claims": claims}).encode()

    return answer


def change(**values):
    def answer(payload):
        return 200, "application/json", json.dumps({"claims": {**payload["claims"], **values}}).encode()

    return answer


def slow(payload):
    time.sleep(3)
    return 200, "application/json", json.dumps({"claims": payload["claims"]}).encode()


FAILING_HOOKS = [
    ("failing", lambda payload: (500, "application/json", b"{}"), 500, "unexpected_failure"),
    ("not_json", lambda payload: (200, "application/json", b"<html>oops"), 500, "unexpected_failure"),
    ("html", lambda payload: (200, "text/html", b"<p>hi</p>"), 400, "hook_payload_invalid_content_type"),
    ("no_content_type", lambda payload: (200, None, b"{}"), 400, "hook_payload_invalid_content_type"),
    ("no_claims", lambda payload: (200, "application/json", b'{"other": 1}'), 500, "unexpected_failure"),
    (
        "claims_not_object",
        lambda payload: (200, "application/json", b'{"claims": []}'),
        500,
        "unexpected_failure",
    ),
    ("empty_204", lambda payload: (204, None, b""), 500, "unexpected_failure"),
    ("strips_session_id", strip("session_id"), 500, "unexpected_failure"),
    ("strips_aal", strip("aal"), 500, "unexpected_failure"),
    ("exp_as_text", change(exp="soon"), 500, "unexpected_failure"),
    ("is_anonymous_as_int", change(is_anonymous=0), 500, "unexpected_failure"),
    ("changes_sub", change(sub="2"), 500, "unexpected_failure"),
    ("changes_role", change(role="service_role"), 500, "unexpected_failure"),
    ("extends_exp", change(exp=2**40), 500, "unexpected_failure"),
    (
        "its_own_error",
        lambda p: (200, "application/json", b'{"error": {"http_code": 403, "message": "Go away"}}'),
        403,
        "unknown",
    ),
    ("redirect", lambda payload: (302, "application/json", b"{}"), 500, "unexpected_failure"),
    (
        "too_large",
        lambda p: (200, "application/json", b'{"claims": "' + b"x" * 300_000 + b'"}'),
        422,
        "hook_payload_over_size_limit",
    ),
    ("slow", slow, 422, "hook_timeout"),
]


@pytest.mark.parametrize(
    "answer, status, code", [case[1:] for case in FAILING_HOOKS], ids=[c[0] for c in FAILING_HOOKS]
)
def test_a_custom_access_token_hook_that_fails_refuses_the_sign_in(
    hooked, hook, monkeypatch, answer, status, code
):
    api = hooked("custom_access_token")
    hook.answer = change()  # a hook that approves: the genuine control
    assert "access_token" in api.sign_up()
    monkeypatch.setattr(hooks, "TIMEOUT", 1.0)  # the slow hook takes 3 s
    hook.answer = answer
    response = api.sign_in()
    body = assert_auth_error(response, status, code)
    assert "access_token" not in body and "eyJ" not in response.get_data(as_text=True)


def test_a_hook_whose_signature_does_not_verify_refuses(hooked, hook):
    api = hooked("custom_access_token", secrets=OTHER_SECRET)  # the hook knows another secret
    hook.answer = change()
    response = api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"})
    assert_auth_error(response, 500, "unexpected_failure")
    assert response.json["msg"] == "Hook requires authorization token"
    assert hook.calls and not hook.calls[0]["verified"]
    # Nothing was made: the sign-up is rolled back with the token it could not sign.
    hook.secret = OTHER_SECRET
    assert "access_token" in api.sign_up()


def test_an_unreachable_hook_is_retried_then_refused(make_app, anon_key, monkeypatch):
    monkeypatch.setattr(hooks, "BACKOFF", 0.05)
    closed = f"http://127.0.0.1:{free_port()}/hook"
    api = Api(
        make_app(
            HOOK_CUSTOM_ACCESS_TOKEN_ENABLED=True,
            HOOK_CUSTOM_ACCESS_TOKEN_URI=closed,
            HOOK_CUSTOM_ACCESS_TOKEN_SECRETS=HOOK_SECRET,
        ),
        anon_key,
    )
    response = api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"})
    assert_auth_error(response, 422, "hook_timeout_after_retry")


# --- send_email


def test_send_email_hands_the_mail_to_the_hook_instead_of_smtp(hooked, hook):
    closed_smtp = free_port()  # were SMTP used, the request would be a 503
    api = hooked(
        "send_email",
        MAILER_AUTOCONFIRM=False,
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=closed_smtp,
        REDIRECT_ALLOW_LIST="http://localhost:3000/**",
    )
    response = api.post(
        "/auth/v1/signup?redirect_to=http://localhost:3000/welcome",
        json={"email": "ann@example.com", "password": "secret-pw"},
    )
    assert response.status_code == 200 and "access_token" not in response.json
    (call,) = hook.calls
    assert call["verified"] and call["payload"]["metadata"]["name"] == "send-email"
    data, user = call["payload"]["email_data"], call["payload"]["user"]
    assert user["email"] == "ann@example.com" and user["id"] == "1"
    assert data["email_action_type"] == "signup" and len(data["token"]) == 6
    assert data["site_url"].endswith("/auth/v1") and data["redirect_to"] == "http://localhost:3000/welcome"
    verified = api.post("/auth/v1/verify", json={"type": "signup", "token_hash": data["token_hash"]})
    assert verified.status_code == 200 and verified.json["user"]["email"] == "ann@example.com"
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    assert hook.calls[-1]["payload"]["email_data"]["email_action_type"] == "recovery"


def test_a_failing_send_email_hook_leaves_nothing_behind(hooked, hook):
    api = hooked("send_email", MAILER_AUTOCONFIRM=False)
    hook.answer = lambda payload: (500, None, b"")
    response = api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"})
    assert_auth_error(response, 500, "unexpected_failure")
    hook.answer = lambda payload: (204, None, b"")
    # The user was rolled back with the mail: signing up again works.
    assert (
        api.post("/auth/v1/signup", json={"email": "ann@example.com", "password": "secret-pw"}).status_code
        == 200
    )


# --- before_user_created


def company_only(payload):
    if payload["user"]["email"].endswith("@example.com"):
        return 204, None, b""
    return (
        200,
        "application/json",
        json.dumps({"error": {"http_code": 403, "message": "Only company addresses"}}).encode(),
    )


def test_before_user_created_vetoes_every_way_a_user_is_made(hooked, hook, service_key):
    api = hooked("before_user_created")
    hook.answer = company_only
    stranger = {"email": "eve@elsewhere.org", "password": "secret-pw"}
    assert_auth_error(api.post("/auth/v1/signup", json=stranger), 403, "unknown")
    assert api.post("/auth/v1/signup", json=stranger).json["msg"] == "Only company addresses"
    assert_auth_error(
        api.post("/auth/v1/otp", json={"email": "eve@elsewhere.org", "create_user": True}), 403, "unknown"
    )
    admin = Api(api.app, service_key)
    assert_auth_error(admin.post("/auth/v1/admin/users", json=stranger), 403, "unknown")
    assert_auth_error(admin.post("/auth/v1/invite", json={"email": "eve@elsewhere.org"}), 403, "unknown")
    assert admin.get("/auth/v1/admin/users").json["users"] == []
    assert api.sign_up(data_key="x")["user"]["email"] == "ann@example.com"
    seen = hook.calls[-1]
    assert seen["verified"] and seen["payload"]["metadata"]["name"] == "before-user-created"
    assert seen["payload"]["user"]["email"] == "ann@example.com"
    assert seen["payload"]["user"]["app_metadata"] == {"provider": "email", "providers": ["email"]}
    assert seen["payload"]["user"]["user_metadata"] == {"data_key": "x"}


# --- password_verification_attempt


def test_password_verification_attempt_can_reject_and_log_out(hooked, hook):
    api = hooked("password_verification_attempt")
    token = api.sign_up()["access_token"]
    hook.json({"decision": "continue"})
    assert api.sign_in().status_code == 200
    assert hook.calls[-1]["payload"]["valid"] is True and hook.calls[-1]["verified"]
    assert_auth_error(api.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    assert hook.calls[-1]["payload"]["valid"] is False
    hook.json({"decision": "reject", "message": "Too many attempts", "should_logout_user": True})
    rejected = api.sign_in()  # the right password
    assert_auth_error(rejected, 400, "invalid_credentials")
    assert rejected.json["msg"] == "Too many attempts"
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "session_not_found")
    hook.json({"decision": "reject"})
    assert api.sign_in().json["msg"] == "Further password verification attempts will be rejected."
    hook.json({"decision": 1})
    assert_auth_error(api.sign_in(), 500, "unexpected_failure")
    assert api.sign_in(email="nobody@example.com").json["error_code"] == "invalid_credentials"
    assert all(call["payload"]["user_id"] == "1" for call in hook.calls)  # never asked about no one


# --- mfa_verification_attempt


def test_mfa_verification_attempt_can_reject(hooked, hook):
    api = hooked("mfa_verification_attempt")
    token = api.sign_up()["access_token"]
    enrolled = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp"}).json
    factor, secret = enrolled["id"], enrolled["totp"]["secret"]

    def attempt(code):
        challenge = api.post(f"/auth/v1/factors/{factor}/challenge", token=token).json["id"]
        return api.post(
            f"/auth/v1/factors/{factor}/verify", token=token, json={"challenge_id": challenge, "code": code}
        )

    hook.json({"decision": "reject", "message": "Locked out"})
    rejected = attempt(pyotp.TOTP(secret).now())
    assert_auth_error(rejected, 403, "mfa_verification_rejected")
    assert rejected.json["msg"] == "Locked out"
    payload = hook.calls[-1]["payload"]
    assert payload["valid"] is True and payload["factor_id"] == factor and payload["factor_type"] == "totp"
    assert_auth_error(api.get("/auth/v1/user", token=token), 401, "session_not_found")  # logged out
    token = api.sign_in().json["access_token"]
    hook.json({"decision": "continue"})
    assert attempt("000000").json["error_code"] == "mfa_verification_failed"
    assert hook.calls[-1]["payload"]["valid"] is False


# --- the settings


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"HOOK_SEND_EMAIL_ENABLED": "true"}, "must be the hook's http"),
        (
            {"HOOK_SEND_EMAIL_ENABLED": "true", "HOOK_SEND_EMAIL_URI": "pg-functions://postgres/public/hook"},
            "no pg-functions",
        ),
        ({"HOOK_SEND_EMAIL_ENABLED": "true", "HOOK_SEND_EMAIL_URI": "file:///etc/passwd"}, "http\\(s\\) URL"),
        (
            {
                "HOOK_SEND_EMAIL_ENABLED": "true",
                "HOOK_SEND_EMAIL_URI": "http://hooks.example.com/x",
                "HOOK_SEND_EMAIL_SECRETS": HOOK_SECRET,
            },
            "plain http is only",
        ),
        (
            {"HOOK_SEND_EMAIL_ENABLED": "true", "HOOK_SEND_EMAIL_URI": "https://hooks.example.com/x"},
            "Standard Webhooks secrets",
        ),
        (
            {
                "HOOK_SEND_EMAIL_ENABLED": "true",
                "HOOK_SEND_EMAIL_URI": "https://hooks.example.com/x",
                "HOOK_SEND_EMAIL_SECRETS": "whsec_abc",
            },
            "Standard Webhooks secrets",
        ),
        (
            {
                "HOOK_SEND_EMAIL_ENABLED": "true",
                "HOOK_SEND_EMAIL_URI": "https://hooks.example.com/x",
                "HOOK_SEND_EMAIL_SECRETS": f"{HOOK_SECRET}|v1,nope",
            },
            "Standard Webhooks secrets",
        ),
    ],
)
def test_a_hook_setting_that_cannot_work_stops_the_start(settings, message):
    with pytest.raises(ConfigError, match=message):
        flask_settings(from_environment(settings))


def test_https_hooks_and_several_secrets_are_accepted():
    settings = {
        "HOOK_SEND_EMAIL_ENABLED": "true",
        "HOOK_SEND_EMAIL_URI": "https://hooks.example.com/send",
        "HOOK_SEND_EMAIL_SECRETS": f"{HOOK_SECRET}|{OTHER_SECRET}",
    }
    assert flask_settings(from_environment(settings))["HOOK_SEND_EMAIL_SECRETS"] == [
        HOOK_SECRET,
        OTHER_SECRET,
    ]


def test_with_the_send_email_hook_the_start_does_not_warn_about_smtp(hooked, caplog):
    hooked("send_email")
    assert "SMTP_HOST is not set" not in caplog.text
    hooked()
    assert "SMTP_HOST is not set" in caplog.text
