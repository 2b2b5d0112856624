"""WebAuthn as a second factor (MFA_WEB_AUTHN_ENROLL_ENABLED / _VERIFY_ENABLED): GoTrue's enroll, a
challenge that creates the factor's credential and later asks for it, a verify that raises the
session to aal2; the attacks beside the same ceremony succeeding. On both databases."""

import json
import re
import time

import jwt
import pyotp
import pytest
from authenticator import Authenticator, b64url

from support import Api, assert_auth_error

ORIGIN = "http://localhost:5173"


@pytest.fixture
def make(make_app, anon_key):
    def build(**settings):
        defaults = {
            "MFA_WEB_AUTHN_ENROLL_ENABLED": True,
            "MFA_WEB_AUTHN_VERIFY_ENABLED": True,
            "SITE_URL": ORIGIN,
        }
        return Api(make_app(**{**defaults, **settings}), anon_key)

    return build


@pytest.fixture
def api(make):
    return make()


def claims(token):
    return jwt.decode(token, options={"verify_signature": False})


def challenge(api, token, factor_id):
    response = api.post(f"/auth/v1/factors/{factor_id}/challenge", token=token, json={})
    assert response.status_code == 200, response.json
    return response.json


def public_key(challenged):
    return challenged["webauthn"]["credential_options"]["publicKey"]


def answer(api, token, factor_id, challenged, credential, kind=None):
    webauthn = {"type": kind or challenged["webauthn"]["type"], "credential_response": credential}
    body = {"challenge_id": challenged["id"], "webauthn": webauthn}
    return api.post(f"/auth/v1/factors/{factor_id}/verify", token=token, json=body)


def enrolled(api, device, email="ann@example.com"):
    """A user with a verified WebAuthn factor: (their aal2 token, the factor id)."""
    token = api.sign_up(email)["access_token"]
    factor = api.post(
        "/auth/v1/factors", token=token, json={"factor_type": "webauthn", "friendly_name": "key"}
    )
    assert factor.status_code == 200, factor.json
    assert factor.json == {"id": factor.json["id"], "type": "webauthn", "friendly_name": "key"}
    created = challenge(api, token, factor.json["id"])
    assert created["type"] == "webauthn" and created["webauthn"]["type"] == "create"
    verified = answer(api, token, factor.json["id"], created, device.create(public_key(created)))
    assert verified.status_code == 200, verified.json
    return verified.json["access_token"], factor.json["id"]


def test_enroll_verify_then_step_up_with_the_key(api):
    device = Authenticator()
    token, factor_id = enrolled(api, device)
    assert claims(token)["aal"] == "aal2" and claims(token)["amr"][0]["method"] == "webauthn"
    [factor] = api.get("/auth/v1/user", token=token).json["factors"]
    assert (factor["factor_type"], factor["status"]) == ("webauthn", "verified")
    aal1 = api.sign_in().json["access_token"]
    assert claims(aal1)["aal"] == "aal1"
    asked = challenge(api, aal1, factor_id)
    assert asked["webauthn"]["type"] == "request"
    allowed = public_key(asked)["allowCredentials"]
    assert [item["id"] for item in allowed] == [b64url(device.credentials[0].id)]
    raised = answer(api, aal1, factor_id, asked, device.get(public_key(asked)))
    assert raised.status_code == 200, raised.json
    assert claims(raised.json["access_token"])["aal"] == "aal2"
    # Unenrolled from aal2: the factor and its key are gone.
    assert api.delete(f"/auth/v1/factors/{factor_id}", token=raised.json["access_token"]).status_code == 200
    assert "factors" not in api.get("/auth/v1/user", token=raised.json["access_token"]).json


def test_replays_other_origins_counters_and_other_users_are_refused(api):
    device = Authenticator()
    _, factor_id = enrolled(api, device)
    aal1 = api.sign_in().json["access_token"]
    asked = challenge(api, aal1, factor_id)
    good = device.get(public_key(asked))
    assert answer(api, aal1, factor_id, asked, good).status_code == 200
    assert_auth_error(answer(api, aal1, factor_id, asked, good), 400, "webauthn_challenge_not_found")
    for where in ({"origin": "http://evil.example"}, {"rp_id": "evil.example"}, {"count": 1}):
        asked = challenge(api, aal1, factor_id)
        refused = answer(api, aal1, factor_id, asked, device.get(public_key(asked), **where))
        assert_auth_error(refused, 400, "webauthn_verification_failed")
    # A create answer to a request challenge; another key answering: refused.
    asked = challenge(api, aal1, factor_id)
    wrong_kind = answer(api, aal1, factor_id, asked, device.get(public_key(asked)), kind="create")
    assert_auth_error(wrong_kind, 400, "webauthn_challenge_not_found")
    stranger = Authenticator()
    stranger.create({"rp": {"id": "localhost"}, "user": {"id": "MQ"}, "challenge": "AA"})
    asked = challenge(api, aal1, factor_id)
    other_key = answer(api, aal1, factor_id, asked, stranger.get(public_key(asked)))
    assert_auth_error(other_key, 400, "webauthn_verification_failed")
    # Another user can neither answer this factor's challenge nor see the factor.
    bob = api.sign_up("bob@example.com")["access_token"]
    asked = challenge(api, aal1, factor_id)
    assert_auth_error(
        answer(api, bob, factor_id, asked, device.get(public_key(asked))), 404, "mfa_factor_not_found"
    )
    assert answer(api, aal1, factor_id, asked, device.get(public_key(asked))).status_code == 200


def test_hostile_answers_are_4xx(api):
    token = api.sign_up()["access_token"]
    factor_id = api.post("/auth/v1/factors", token=token, json={"factor_type": "webauthn"}).json["id"]
    path = f"/auth/v1/factors/{factor_id}/verify"
    asked = challenge(api, token, factor_id)
    for webauthn in (
        None,
        "x",
        {"type": "other", "credential_response": {}},
        {"type": "create", "credential_response": []},
    ):
        refused = api.post(path, token=token, json={"challenge_id": asked["id"], "webauthn": webauthn})
        assert_auth_error(refused, 400, "validation_failed")
    garbage = {"challenge_id": asked["id"], "webauthn": {"type": "create", "credential_response": {"id": 1}}}
    assert_auth_error(api.post(path, token=token, json=garbage), 400, "webauthn_verification_failed")
    assert_auth_error(api.post(path, token=token, json=garbage), 400, "webauthn_challenge_not_found")


def test_webauthn_factors_are_off_by_default(make):
    api = make(MFA_WEB_AUTHN_ENROLL_ENABLED=False, MFA_WEB_AUTHN_VERIFY_ENABLED=False)
    token = api.sign_up()["access_token"]
    refused = api.post("/auth/v1/factors", token=token, json={"factor_type": "webauthn"})
    assert_auth_error(refused, 422, "mfa_webauthn_enroll_not_enabled")
    assert refused.json["msg"] == "MFA enroll is disabled for WebAuthn"


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def dashboard_sign_in(api, email="ann@example.com", password="secret-pw"):
    """The dashboard's password step through its form: the page it lands on."""
    form = api.client.get("/dashboard/")
    signed = api.client.post(
        "/dashboard/sign-in",
        data={"email": email, "password": password, "csrf": CSRF.search(form.get_data(as_text=True))[1]},
    )
    assert signed.status_code == 303, signed.get_data(as_text=True)
    return api.client.get("/dashboard/")


def make_admin(api, service_key, token):
    user_id = api.get("/auth/v1/user", token=token).json["id"]
    body = {"app_metadata": {"role": "admin"}}
    made = Api(api.app, service_key).put(f"/auth/v1/admin/users/{user_id}", token=service_key, json=body)
    assert made.status_code == 200, made.json


def test_a_dashboard_admin_signs_in_with_a_webauthn_factor(make, service_key):
    """The dashboard's second step with a security key: options from the auth API's MFA service,
    the key's assertion checked by it. Replays, another key, a missing answer, no CSRF token and no
    password step are refused beside the same request succeeding; the code form, which no WebAuthn
    factor can answer, is refused without counting toward the lockout."""
    api = make(RATE_LIMITS=True)
    device = Authenticator()
    token, factor_id = enrolled(api, device)
    make_admin(api, service_key, token)
    assert api.client.post("/dashboard/key/options", data={"csrf": "x"}).status_code == 401  # no password yet

    second = dashboard_sign_in(api)
    text = second.get_data(as_text=True)
    assert second.status_code == 200 and "data-key-options" in text and 'name="code"' not in text
    csrf = CSRF.search(text)[1]
    for _ in range(12):  # past the 10 failures that would lock the account's password sign-ins
        tried = api.client.post("/dashboard/code", data={"code": "123456", "csrf": csrf})
        assert tried.status_code == 403 and "security key or passkey" in tried.get_data(as_text=True)
    assert api.sign_in().status_code == 200  # no lockout

    def options():
        asked = api.client.post("/dashboard/key/options", data={"csrf": csrf})
        assert asked.status_code == 200, asked.get_data(as_text=True)
        assert asked.json["factor_id"] == factor_id
        return asked.json

    def answer(asked, credential, **fields):
        form = {"csrf": csrf, "factor_id": asked["factor_id"], "challenge_id": asked["challenge_id"],
                "credential": json.dumps(credential), "next": "/dashboard/tables", **fields}  # fmt: skip
        return api.client.post("/dashboard/key", data=form)

    assert api.client.post("/dashboard/key/options", data={}).status_code == 403  # no CSRF token
    asked = options()
    assert answer(asked, device.get(asked["options"]), csrf="forged").status_code == 403
    stranger = Authenticator()
    stranger.create({"rp": {"id": "localhost"}, "user": {"id": b64url(b"1")}, "challenge": "x"})
    refused = answer(asked, stranger.get(asked["options"]))
    assert refused.status_code == 400 and refused.json == {"error": "Credential verification failed"}
    assert api.client.get("/dashboard/users").status_code != 200
    asked = options()
    missing = api.client.post("/dashboard/key", data={"csrf": csrf, "credential": "[]"})
    assert missing.status_code == 400 and "answer" in missing.json["error"]
    for hostile in ("..", "%2e", "a\x00b", "é" * 40, "00000000-0000-0000-0000-000000000000"):
        wrong = answer(asked, device.get(asked["options"]), factor_id=hostile)
        assert wrong.status_code == 404 and wrong.is_json, hostile
    _, other_factor = enrolled(api, Authenticator(), email="bob@example.com")
    theirs = answer(asked, device.get(asked["options"]), factor_id=other_factor)
    assert theirs.status_code == 404 and theirs.json == {"error": "Factor not found"}
    huge = {"csrf": csrf, "credential": "{" + " " * (2 << 20) + "}"}
    assert api.client.post("/dashboard/key", data=huge).status_code == 413
    good = device.get(asked["options"])
    passed = answer(asked, good)
    assert passed.status_code == 200 and passed.json == {"next": "/dashboard/tables"}
    assert api.client.get("/dashboard/users").status_code == 200
    replayed = answer(asked, good)
    assert replayed.status_code == 400 and replayed.json == {"error": "Challenge not found or already used"}
    assert api.sign_in().status_code == 200


def test_a_dashboard_admin_with_both_kinds_of_factor_is_offered_both(make, service_key):
    api = make()
    token, _ = enrolled(api, Authenticator())
    make_admin(api, service_key, token)
    factor = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp", "friendly_name": "app"})
    secret = factor.json["totp"]["secret"]
    asked = api.post(f"/auth/v1/factors/{factor.json['id']}/challenge", token=token, json={})
    body = {"challenge_id": asked.json["id"], "code": pyotp.TOTP(secret).now()}
    assert api.post(f"/auth/v1/factors/{factor.json['id']}/verify", token=token, json=body).status_code == 200
    form = dashboard_sign_in(api)
    text = form.get_data(as_text=True)
    assert form.status_code == 200 and 'name="code"' in text and "data-key-options" in text
    code = pyotp.TOTP(secret).at(time.time() + 30)  # this step's code was spent on the enrolment
    assert (
        api.client.post("/dashboard/code", data={"code": code, "csrf": CSRF.search(text)[1]}).status_code
        == 303
    )
    assert api.client.get("/dashboard/users").status_code == 200


def added(api, token, factor_type, name):
    """A factor enrolled, not verified yet: GoTrue's enroll answer."""
    factor = api.post(
        "/auth/v1/factors", token=token, json={"factor_type": factor_type, "friendly_name": name}
    )
    assert factor.status_code == 200, factor.json
    return factor.json


def totp_verify(api, token, factor, at=None):
    """A code of a TOTP factor (this step's, or the one at `at`) for a new challenge of it."""
    otp = pyotp.TOTP(factor["totp"]["secret"])
    body = {
        "challenge_id": challenge(api, token, factor["id"])["id"],
        "code": otp.now() if at is None else otp.at(at),
    }
    return api.post(f"/auth/v1/factors/{factor['id']}/verify", token=token, json=body)


def test_a_factor_left_unverified_cannot_be_finished_from_aal1_once_another_is_verified(api):
    """A security key whose ceremony was cancelled stays an unverified factor. Once the user has a
    verified factor, finishing that one (with an attacker's own authenticator, from a session that
    only knows the password) is enrolling, and takes aal2 as enrolling does: 403 insufficient_aal,
    and the factor stays unverified. The same for a TOTP factor left unverified."""
    token = api.sign_up()["access_token"]
    key, totp = added(api, token, "webauthn", "key"), added(api, token, "totp", "app")
    assert totp_verify(api, token, totp).status_code == 200
    factors = api.get("/auth/v1/user", token=token).json["factors"]
    assert {f["friendly_name"]: f["status"] for f in factors} == {"key": "unverified", "app": "verified"}
    aal1 = api.sign_in().json["access_token"]
    created = challenge(api, aal1, key["id"])
    assert created["webauthn"]["type"] == "create"
    attacker = answer(api, aal1, key["id"], created, Authenticator().create(public_key(created)))
    assert_auth_error(attacker, 403, "insufficient_aal")
    factors = api.get("/auth/v1/user", token=aal1).json["factors"]
    assert {f["friendly_name"]: f["status"] for f in factors}["key"] == "unverified"
    # From aal2 (the verified TOTP factor's next code), the user may finish it.
    aal2 = totp_verify(api, aal1, totp, at=time.time() + 30).json["access_token"]
    created = challenge(api, aal2, key["id"])
    finished = answer(api, aal2, key["id"], created, Authenticator().create(public_key(created)))
    assert finished.status_code == 200, finished.json


def test_a_totp_factor_left_unverified_cannot_be_finished_from_aal1_once_a_key_is_verified(api):
    token = api.sign_up()["access_token"]
    totp, key = added(api, token, "totp", "app"), added(api, token, "webauthn", "key")
    created = challenge(api, token, key["id"])
    assert (
        answer(api, token, key["id"], created, Authenticator().create(public_key(created))).status_code == 200
    )
    aal1 = api.sign_in().json["access_token"]
    assert_auth_error(totp_verify(api, aal1, totp), 403, "insufficient_aal")
