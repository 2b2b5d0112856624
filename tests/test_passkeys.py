"""Passkeys (PASSKEY_ENABLED): GoTrue's registration and sign-in ceremonies, a user's list, the admin's,
verified by py_webauthn, with a software authenticator (tests/authenticator.py) playing the browser.
Each attack beside the same ceremony succeeding. On both databases."""

import threading
import uuid

import jwt
import pytest
import requests
from authenticator import Authenticator

from auth import tokens
from support import Api, SupabaseJs, assert_auth_error, serve_app

ORIGIN = "http://localhost:5173"  # auth-js's own test server's RP: id localhost, this origin
UUID_FORM = 36


@pytest.fixture
def make(make_app, anon_key):
    def build(**settings):
        return Api(make_app(**{"PASSKEY_ENABLED": True, "SITE_URL": ORIGIN, **settings}), anon_key)

    return build


@pytest.fixture
def api(make):
    return make()


def register(api, token, device, **create):
    options = api.post("/auth/v1/passkeys/registration/options", token=token, json={})
    assert options.status_code == 200, options.json
    body = {
        "challenge_id": options.json["challenge_id"],
        "credential": device.create(options.json["options"], **create),
    }
    return api.post("/auth/v1/passkeys/registration/verify", token=token, json=body)


def sign_in_options(api):
    options = api.post("/auth/v1/passkeys/authentication/options", json={})
    assert options.status_code == 200, options.json
    return options.json


def sign_in(api, device, options=None, **get):
    options = options or sign_in_options(api)
    body = {"challenge_id": options["challenge_id"], "credential": device.get(options["options"], **get)}
    return api.post("/auth/v1/passkeys/authentication/verify", json=body)


def claims(token):
    return jwt.decode(token, options={"verify_signature": False})


def test_a_user_registers_a_passkey_and_signs_in_with_it(api):
    session = api.sign_up()
    token, device = session["access_token"], Authenticator()
    options = api.post("/auth/v1/passkeys/registration/options", token=token, json={}).json
    assert len(options["challenge_id"]) == UUID_FORM and options["expires_at"] > tokens.now()
    creation = options["options"]
    assert creation["rp"]["id"] == "localhost" and creation["user"]["name"] == "ann@example.com"
    assert {"alg": -7, "type": "public-key"} in creation["pubKeyCredParams"]
    assert creation["authenticatorSelection"]["residentKey"] == "required"
    created = api.post(
        "/auth/v1/passkeys/registration/verify",
        token=token,
        json={"challenge_id": options["challenge_id"], "credential": device.create(creation)},
    )
    assert created.status_code == 200, created.json
    assert set(created.json) == {"id", "friendly_name", "created_at"} and len(created.json["id"]) == UUID_FORM
    listed = api.get("/auth/v1/passkeys", token=token).json
    assert [item["id"] for item in listed] == [created.json["id"]] and "last_used_at" not in listed[0]

    signed_in = sign_in(api, device)
    assert signed_in.status_code == 200, signed_in.json
    assert signed_in.json["user"]["id"] == session["user"]["id"]
    assert claims(signed_in.json["access_token"])["amr"][0]["method"] == "passkey"
    assert api.get("/auth/v1/user", token=signed_in.json["access_token"]).status_code == 200
    assert "last_used_at" in api.get("/auth/v1/passkeys", token=token).json[0]
    # Rename, then delete; the admin sees and deletes them too.
    renamed = api.patch(
        f"/auth/v1/passkeys/{created.json['id']}", token=token, json={"friendly_name": "Phone"}
    )
    assert renamed.status_code == 200 and renamed.json["friendly_name"] == "Phone"
    assert api.delete(f"/auth/v1/passkeys/{created.json['id']}", token=token).status_code == 204
    assert api.get("/auth/v1/passkeys", token=token).json == []
    assert_auth_error(sign_in(api, device), 400, "webauthn_verification_failed")


def test_the_admin_lists_and_deletes_a_users_passkeys(api, service_key):
    session = api.sign_up()
    created = register(api, session["access_token"], Authenticator()).json
    admin = Api(api.app, service_key)
    user_id = session["user"]["id"]
    assert [item["id"] for item in admin.get(f"/auth/v1/admin/users/{user_id}/passkeys").json] == [
        created["id"]
    ]
    assert_auth_error(
        api.get(f"/auth/v1/admin/users/{user_id}/passkeys", token=session["access_token"]), 403, "not_admin"
    )
    assert_auth_error(admin.get("/auth/v1/admin/users/999/passkeys"), 404, "user_not_found")
    assert_auth_error(
        admin.delete(f"/auth/v1/admin/users/{user_id}/passkeys/{uuid.uuid4()}"), 404, "validation_failed"
    )
    assert admin.delete(f"/auth/v1/admin/users/{user_id}/passkeys/{created['id']}").status_code == 204
    assert admin.get(f"/auth/v1/admin/users/{user_id}/passkeys").json == []


def test_the_admin_passkey_routes_refuse_all_but_the_service_key_and_another_users_passkey(
    api, service_key, anon_key
):
    ann = api.sign_up()
    bob = api.sign_up(email="bob@example.com")
    anns = register(api, ann["access_token"], Authenticator()).json
    admin = Api(api.app, service_key)
    listing = f"/auth/v1/admin/users/{ann['user']['id']}/passkeys"
    forged = jwt.encode({"role": "service_role", "exp": 4102444800}, "another-secret-" + "y" * 40)
    for headers in ({"apikey": anon_key, "Authorization": f"Bearer {anon_key}"},
                    {"apikey": forged, "Authorization": f"Bearer {forged}"}):  # fmt: skip
        refused = api.app.test_client().get(listing, headers=headers)
        assert refused.status_code in (401, 403)
        assert "credential" not in refused.get_data(as_text=True)
        gone = api.app.test_client().delete(f"{listing}/{anns['id']}", headers=headers)
        assert gone.status_code in (401, 403)
    # ann's passkey is not bob's to have deleted, even by the service
    assert admin.delete(f"/auth/v1/admin/users/{bob['user']['id']}/passkeys/{anns['id']}").status_code == 404
    assert [item["id"] for item in admin.get(listing).json] == [anns["id"]]


def test_passkeys_are_off_by_default(make, anon_key):
    off = make(PASSKEY_ENABLED=False)
    token = off.sign_up()["access_token"]
    for method, path in [
        ("POST", "/auth/v1/passkeys/registration/options"),
        ("POST", "/auth/v1/passkeys/registration/verify"),
        ("POST", "/auth/v1/passkeys/authentication/options"),
        ("POST", "/auth/v1/passkeys/authentication/verify"),
        ("GET", "/auth/v1/passkeys"),
        ("DELETE", f"/auth/v1/passkeys/{uuid.uuid4()}"),
    ]:
        refused = off.request(method, path, token=token, json={})
        assert_auth_error(refused, 404, "passkey_disabled")
        assert refused.json["msg"] == "Passkeys are disabled"
    assert (
        off.client.post("/auth/v1/passkeys/authentication/options", json={}).status_code == 401
    )  # no apikey


def test_a_replayed_challenge_is_refused(api):
    token, device = api.sign_up()["access_token"], Authenticator()
    options = api.post("/auth/v1/passkeys/registration/options", token=token, json={}).json
    body = {"challenge_id": options["challenge_id"], "credential": device.create(options["options"])}
    assert api.post("/auth/v1/passkeys/registration/verify", token=token, json=body).status_code == 200
    again = api.post("/auth/v1/passkeys/registration/verify", token=token, json=body)
    assert_auth_error(again, 400, "webauthn_challenge_not_found")
    # A sign-in's challenge once; an assertion made for one challenge fails another.
    options = sign_in_options(api)
    assertion = {"challenge_id": options["challenge_id"], "credential": device.get(options["options"])}
    assert api.post("/auth/v1/passkeys/authentication/verify", json=assertion).status_code == 200
    replayed = api.post("/auth/v1/passkeys/authentication/verify", json=assertion)
    assert_auth_error(replayed, 400, "webauthn_challenge_not_found")
    moved = {**assertion, "challenge_id": sign_in_options(api)["challenge_id"]}
    assert_auth_error(
        api.post("/auth/v1/passkeys/authentication/verify", json=moved), 400, "webauthn_verification_failed"
    )
    unknown = {**assertion, "challenge_id": str(uuid.uuid4())}
    assert_auth_error(
        api.post("/auth/v1/passkeys/authentication/verify", json=unknown), 400, "webauthn_challenge_not_found"
    )


def test_an_expired_challenge_is_refused(api, monkeypatch):
    token, device = api.sign_up()["access_token"], Authenticator()
    assert register(api, token, device).status_code == 200
    options = sign_in_options(api)
    real_now = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: real_now + 301)
    late = sign_in(api, device, options)
    assert_auth_error(late, 400, "webauthn_challenge_expired")
    monkeypatch.undo()
    assert_auth_error(sign_in(api, device, options), 400, "webauthn_challenge_not_found")  # used up
    assert sign_in(api, device).status_code == 200


ELSEWHERE = [
    {"origin": "http://evil.example"},
    {"rp_id": "evil.example"},
    {"origin": "http://localhost:3000"},
    {"origin": "https://localhost:5173"},
]


@pytest.mark.parametrize("where", ELSEWHERE)
def test_a_ceremony_from_another_origin_or_for_another_rp_is_refused(api, where):
    token, device = api.sign_up()["access_token"], Authenticator()
    assert_auth_error(register(api, token, device, **where), 400, "webauthn_verification_failed")
    assert api.get("/auth/v1/passkeys", token=token).json == []
    assert register(api, token, device).status_code == 200
    assert_auth_error(
        sign_in(api, device, credential=device.credentials[-1], **where), 400, "webauthn_verification_failed"
    )
    assert sign_in(api, device, credential=device.credentials[-1]).status_code == 200


def test_a_sign_counter_that_goes_back_is_refused(api):
    token, device = api.sign_up()["access_token"], Authenticator()
    assert register(api, token, device).status_code == 200
    assert sign_in(api, device, count=5).status_code == 200
    assert_auth_error(sign_in(api, device, count=5), 400, "webauthn_verification_failed")  # a clone's
    assert_auth_error(sign_in(api, device, count=3), 400, "webauthn_verification_failed")
    assert sign_in(api, device, count=6).status_code == 200
    # An authenticator that keeps no counter (0 and 0, as many platform passkeys) signs in each time.
    other = Authenticator(counting=False)
    second = api.sign_up("bob@example.com")["access_token"]
    assert register(api, second, other).status_code == 200
    assert sign_in(api, other).status_code == 200 and sign_in(api, other).status_code == 200


def test_another_users_credential_challenge_or_passkey_is_refused(api):
    ann, bob = api.sign_up()["access_token"], api.sign_up("bob@example.com")["access_token"]
    device = Authenticator()
    created = register(api, ann, device).json
    # Bob registering Ann's credential again: already registered.
    options = api.post("/auth/v1/passkeys/registration/options", token=bob, json={}).json
    again = device.create(options["options"], credential=device.credentials[0])
    body = {"challenge_id": options["challenge_id"], "credential": again}
    assert_auth_error(
        api.post("/auth/v1/passkeys/registration/verify", token=bob, json=body),
        422,
        "webauthn_credential_exists",
    )
    # Bob verifying Ann's registration challenge: it is not his.
    mine = api.post("/auth/v1/passkeys/registration/options", token=ann, json={}).json
    body = {"challenge_id": mine["challenge_id"], "credential": Authenticator().create(mine["options"])}
    assert_auth_error(
        api.post("/auth/v1/passkeys/registration/verify", token=bob, json=body),
        400,
        "webauthn_challenge_not_found",
    )
    # Ann's assertion claiming Bob as its user; Bob renaming or deleting Ann's passkey.
    bob_id = claims(bob)["sub"].encode()
    assert_auth_error(sign_in(api, device, user_handle=bob_id), 400, "webauthn_verification_failed")
    assert sign_in(api, device).json["user"]["email"] == "ann@example.com"
    path = f"/auth/v1/passkeys/{created['id']}"
    assert_auth_error(api.patch(path, token=bob, json={"friendly_name": "mine"}), 404, "validation_failed")
    assert_auth_error(api.delete(path, token=bob), 404, "validation_failed")
    assert api.get("/auth/v1/passkeys", token=bob).json == []
    assert len(api.get("/auth/v1/passkeys", token=ann).json) == 1


def test_who_may_register_and_manage(make, anon_key):
    api = make(ANONYMOUS_USERS_ENABLED=True, PASSKEY_MAX_PASSKEYS_PER_USER=1)
    visitor = api.post("/auth/v1/signup", json={}).json["access_token"]
    refused = api.post("/auth/v1/passkeys/registration/options", token=visitor, json={})
    assert_auth_error(refused, 403, "no_authorization")
    assert_auth_error(api.post("/auth/v1/passkeys/registration/options", json={}), 401, "no_authorization")
    assert_auth_error(
        api.post("/auth/v1/passkeys/registration/options", token="x.y.z", json={}), 401, "bad_jwt"
    )
    token = api.sign_up()["access_token"]
    assert register(api, token, Authenticator()).status_code == 200
    full = api.post("/auth/v1/passkeys/registration/options", token=token, json={})
    assert_auth_error(full, 422, "too_many_passkeys")


def test_a_user_with_a_second_factor_manages_passkeys_from_aal2(api):
    import pyotp

    token, device = api.sign_up()["access_token"], Authenticator()
    created = register(api, token, device).json
    factor = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp"}).json
    challenge = api.post(f"/auth/v1/factors/{factor['id']}/challenge", token=token).json
    code = pyotp.TOTP(factor["totp"]["secret"]).now()
    aal2 = api.post(f"/auth/v1/factors/{factor['id']}/verify", token=token,
                    json={"challenge_id": challenge["id"], "code": code}).json["access_token"]  # fmt: skip
    aal1 = api.sign_in().json["access_token"]
    for refused in (api.post("/auth/v1/passkeys/registration/options", token=aal1, json={}),
                    api.delete(f"/auth/v1/passkeys/{created['id']}", token=aal1)):  # fmt: skip
        assert_auth_error(refused, 403, "insufficient_aal")
    assert api.post("/auth/v1/passkeys/registration/options", token=aal2, json={}).status_code == 200
    assert api.delete(f"/auth/v1/passkeys/{created['id']}", token=aal2).status_code == 204


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({}, 400, "validation_failed"),
        ({"challenge_id": "x", "credential": {}}, 400, "validation_failed"),
        ({"challenge_id": "../../etc", "credential": {}}, 400, "validation_failed"),
        ({"challenge_id": "é" * 10, "credential": {}}, 400, "validation_failed"),
        ({"challenge_id": "a\x00b", "credential": {}}, 400, "validation_failed"),
        ({"challenge_id": str(uuid.uuid4()), "credential": "not an object"}, 400, "validation_failed"),
        ({"challenge_id": str(uuid.uuid4()), "credential": {}}, 400, "webauthn_challenge_not_found"),
        ([1, 2], 400, "bad_json"),
    ],
)
def test_hostile_verify_bodies_are_4xx(api, body, status, code):
    assert_auth_error(api.post("/auth/v1/passkeys/authentication/verify", json=body), status, code)


@pytest.mark.parametrize(
    "credential",
    [
        {},
        {"id": "AA", "rawId": "AA", "type": "public-key", "response": {}},
        {"id": "AA", "rawId": "AA", "type": "public-key",
         "response": {"clientDataJSON": "!!", "authenticatorData": "AA", "signature": "AA"}},
        {"id": 5, "rawId": [1], "type": "public-key", "response": {"clientDataJSON": None}},
        {"id": "A" * 2000, "rawId": "A" * 2000, "type": "public-key", "response": {"clientDataJSON": "e30"}},
    ],
)  # fmt: skip
def test_malformed_credentials_burn_the_challenge_and_are_400(api, credential):
    token = api.sign_up()["access_token"]
    for path, options in (
        ("/auth/v1/passkeys/authentication/verify", sign_in_options(api)),
        (
            "/auth/v1/passkeys/registration/verify",
            api.post("/auth/v1/passkeys/registration/options", token=token, json={}).json,
        ),
    ):
        body = {"challenge_id": options["challenge_id"], "credential": credential}
        assert_auth_error(api.post(path, token=token, json=body), 400, "webauthn_verification_failed")
        assert_auth_error(api.post(path, token=token, json=body), 400, "webauthn_challenge_not_found")


def test_hostile_passkey_ids_and_names(api):
    token = api.sign_up()["access_token"]
    created = register(api, token, Authenticator()).json
    for hostile in ("..", "%2e%2e", "x%00y", "%E2%80%AE", str(uuid.uuid4())):
        assert_auth_error(
            api.patch(f"/auth/v1/passkeys/{hostile}", token=token, json={"friendly_name": "a"}),
            404,
            "validation_failed",
        )
    path = f"/auth/v1/passkeys/{created['id']}"
    assert_auth_error(api.patch(path, token=token, json={"friendly_name": ""}), 400, "validation_failed")
    assert_auth_error(
        api.patch(path, token=token, json={"friendly_name": "x" * 121}), 400, "validation_failed"
    )
    assert (
        api.patch(path, token=token, json={"friendly_name": "Téléphone 📱"}).json["friendly_name"]
        == "Téléphone 📱"
    )
    too_big = api.post("/auth/v1/passkeys/authentication/verify", data="x" * (1024 * 1024 + 1),
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert_auth_error(too_big, 413, "request_too_large")


def test_a_deleted_users_passkey_signs_nobody_in(api, service_key):
    session, device = api.sign_up(), Authenticator()
    assert register(api, session["access_token"], device).status_code == 200
    assert (
        Api(api.app, service_key).delete(f"/auth/v1/admin/users/{session['user']['id']}").status_code == 200
    )
    api.sign_up("next@example.com")  # SQLite may give the id again
    assert_auth_error(sign_in(api, device), 400, "webauthn_verification_failed")


def test_racing_verifies_of_one_challenge_make_one_session(api):
    """Two browsers (or a replay racing the original) send the same assertion at once: the challenge's
    DELETE lets exactly one through."""
    token, device = api.sign_up()["access_token"], Authenticator()
    assert register(api, token, device).status_code == 200
    base, stop = serve_app(api.app)
    try:
        for _ in range(3):
            options = sign_in_options(api)
            body = {"challenge_id": options["challenge_id"], "credential": device.get(options["options"])}
            answers, start = [], threading.Barrier(4)

            def send(body=body, answers=answers, start=start):
                start.wait()
                url = f"{base}/auth/v1/passkeys/authentication/verify"
                sent = requests.post(url, json=body, headers={"apikey": api.key}, timeout=30)
                answers.append(sent.status_code)

            threads = [threading.Thread(target=send) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(answers) == [200, 400, 400, 400], answers
    finally:
        stop()


@pytest.mark.slow  # node
def test_supabase_js_registers_lists_renames_signs_in_and_deletes(api, anon_key, node_modules):
    """auth-js 2.109's passkey calls (auth.passkey.*, experimental: { passkey: true }), the
    authenticator answering in between as the browser's WebAuthn does."""
    base, stop = serve_app(api.app)
    device = Authenticator()
    try:
        with SupabaseJs(base, anon_key) as js:
            assert (
                js("ann", "auth.signUp", {"email": "js@example.com", "password": "secret-pw"})["error"]
                is None
            )
            started = js("ann", "auth.passkey.startRegistration")
            assert started["error"] is None and started["data"]["options"]["rp"]["id"] == "localhost"
            credential = device.create(started["data"]["options"])
            challenge_id = started["data"]["challenge_id"]
            created = js(
                "ann",
                "auth.passkey.verifyRegistration",
                {"challengeId": challenge_id, "credential": credential},
            )
            assert created["error"] is None and created["data"]["id"]
            passkey_id = created["data"]["id"]
            renamed = js("ann", "auth.passkey.update", {"passkeyId": passkey_id, "friendlyName": "Laptop"})
            assert renamed["error"] is None and renamed["data"]["friendly_name"] == "Laptop"
            assert [item["friendly_name"] for item in js("ann", "auth.passkey.list")["data"]] == ["Laptop"]

            options = js("visitor", "auth.passkey.startAuthentication")
            assert options["error"] is None
            assertion = device.get(options["data"]["options"])
            answer = {"challengeId": options["data"]["challenge_id"], "credential": assertion}
            signed_in = js("visitor", "auth.passkey.verifyAuthentication", answer)
            assert signed_in["error"] is None and signed_in["data"]["user"]["email"] == "js@example.com"
            assert js("visitor", "auth.getUser")["data"]["user"]["email"] == "js@example.com"
            replayed = js("other", "auth.passkey.verifyAuthentication", answer)
            assert replayed["error"]["code"] == "webauthn_challenge_not_found"
            assert js("ann", "auth.passkey.delete", {"passkeyId": passkey_id})["error"] is None
            assert js("ann", "auth.passkey.list")["data"] == []
            missing = js("nobody", "auth.passkey.startRegistration")
            assert missing["error"]["name"] == "AuthSessionMissingError"
    finally:
        stop()
