"""The TOTP second factor through the HTTP API, on both databases: enrolling, challenging, verifying,
the assurance level a session keeps, unenrolling, the administrator's view, secrets sealed at rest,
and the attacks (replays, old codes, brute force, other users' factors, expired challenges, an aal1
session unenrolling, a refresh raising its level). Codes are computed here with pyotp."""

import base64

import jwt
import pyotp
import pytest
import sqlalchemy as sa
from sqlalchemy import select

from auth import encryption, tokens
from extensions import db
from models.auth import Factor, Session
from support import SECRET, Api, assert_auth_error

START = (tokens.now() // 30) * 30 + 15  # the middle of a step: codes of "now" do not roll over mid-test


@pytest.fixture
def clock(monkeypatch):
    """The service's clock, stopped at START; `clock.move(seconds)` moves it."""

    class Clock:
        at = START

        def move(self, seconds):
            self.at += seconds

    stopped = Clock()
    monkeypatch.setattr(tokens, "now", lambda: stopped.at)
    return stopped


def claims(session):
    options = {"verify_exp": False, "verify_iat": False}  # the service's clock is not the real one here
    return jwt.decode(
        session["access_token"], SECRET, algorithms=["HS256"], audience="authenticated", options=options
    )


def code(secret, at, steps=0):
    return pyotp.TOTP(secret).at(at + 30 * steps)


def enroll(api, token, name="phone"):
    response = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp", "friendly_name": name})
    assert response.status_code == 200, response.json
    return response.json


def challenge(api, token, factor_id):
    response = api.post(f"/auth/v1/factors/{factor_id}/challenge", token=token)
    assert response.status_code == 200, response.json
    return response.json["id"]


def verify(api, token, factor_id, challenge_id, value):
    body = {"challenge_id": challenge_id, "code": value}
    return api.post(f"/auth/v1/factors/{factor_id}/verify", token=token, json=body)


def with_verified_factor(api, clock):
    """Ann signed up with a verified factor: (aal2 session, factor id, secret)."""
    token = api.sign_up()["access_token"]
    factor = enroll(api, token)
    response = verify(
        api,
        token,
        factor["id"],
        challenge(api, token, factor["id"]),
        code(factor["totp"]["secret"], clock.at),
    )
    assert response.status_code == 200, response.json
    return response.json, factor["id"], factor["totp"]["secret"]


def test_the_whole_flow_and_the_level_a_session_keeps(api, clock):
    token = api.sign_up()["access_token"]
    enrolled = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp", "issuer": "Acme"})
    assert enrolled.status_code == 200
    factor = enrolled.json
    assert set(factor) == {"id", "type", "friendly_name", "totp"}
    assert factor["type"] == "totp" and factor["friendly_name"] == ""
    totp = factor["totp"]
    assert totp["qr_code"].startswith("<svg") and "#" not in totp["qr_code"]  # fits after data:…,
    assert len(base64.b32decode(totp["secret"])) == 20
    assert totp["uri"].startswith("otpauth://totp/Acme:ann%40example.com?") and "issuer=Acme" in totp["uri"]
    listed = api.get("/auth/v1/user", token=token).json["factors"]
    assert [(f["id"], f["status"], f["factor_type"]) for f in listed] == [
        (factor["id"], "unverified", "totp")
    ]

    answer = api.post(f"/auth/v1/factors/{factor['id']}/challenge", token=token).json
    assert set(answer) == {"id", "type", "expires_at"}
    assert answer["type"] == "totp" and answer["expires_at"] == clock.at + 300
    clock.move(5)
    verified = verify(api, token, factor["id"], answer["id"], code(totp["secret"], clock.at))
    assert verified.status_code == 200, verified.json
    session = verified.json
    assert claims(session)["aal"] == "aal2"
    assert claims(session)["amr"] == [
        {"method": "totp", "timestamp": START + 5},
        {"method": "password", "timestamp": START},
    ]
    assert session["user"]["factors"][0]["status"] == "verified"

    clock.move(60)
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert refreshed.status_code == 200
    assert claims(refreshed.json)["aal"] == "aal2" and claims(refreshed.json)["amr"] == claims(session)["amr"]

    signed_in = api.sign_in().json  # a password alone: aal1, and the user object says aal2 is possible
    assert claims(signed_in)["aal"] == "aal1"
    assert [f["status"] for f in signed_in["user"]["factors"]] == ["verified"]
    again = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": signed_in["refresh_token"]}
    )
    assert claims(again.json)["aal"] == "aal1"  # a refresh does not raise the level


def test_a_verify_ends_the_users_aal1_sessions_and_rotates_the_refresh_token(api, clock):
    first = api.sign_up()
    other = api.sign_in().json
    factor = enroll(api, first["access_token"])
    secret = factor["totp"]["secret"]
    chal = challenge(api, first["access_token"], factor["id"])
    assert verify(api, first["access_token"], factor["id"], chal, code(secret, clock.at)).status_code == 200
    assert_auth_error(api.get("/auth/v1/user", token=other["access_token"]), 401, "session_not_found")
    clock.move(60)  # past the reuse interval: the aal1 refresh token of before is spent
    old = api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": first["refresh_token"]})
    assert_auth_error(old, 400, "refresh_token_already_used")


def test_secrets_are_sealed_at_rest_and_the_key_rotates(make_app, anon_key, clock):
    api = Api(make_app(), anon_key)
    session, factor_id, secret = with_verified_factor(api, clock)
    with api.app.app_context():
        stored = db.session.get(Factor, factor_id).secret
    assert secret not in stored
    raw = base64.urlsafe_b64decode(stored.split(".")[2])
    assert secret.encode() not in raw and base64.b32decode(secret) not in raw

    # The operator rotates: MFA_ENCRYPTION_KEY = new key, then the old one (JWT_SECRET by default).
    new_key = "n" * 40
    rotated = Api(make_app(MFA_ENCRYPTION_KEY=f"{new_key},{SECRET}"), anon_key)
    token = session["access_token"]
    clock.move(30)
    chal = challenge(rotated, token, factor_id)
    assert verify(rotated, token, factor_id, chal, code(secret, clock.at)).status_code == 200
    with rotated.app.app_context():
        resealed = db.session.get(Factor, factor_id).secret
        assert encryption.is_current(resealed) and resealed != stored
    only_new = Api(make_app(MFA_ENCRYPTION_KEY=new_key), anon_key)
    token = only_new.sign_in().json["access_token"]
    clock.move(30)
    chal = challenge(only_new, token, factor_id)
    assert verify(only_new, token, factor_id, chal, code(secret, clock.at)).status_code == 200
    with only_new.app.app_context(), pytest.raises(encryption.SealError):
        encryption.unseal(stored, factor_id)  # the old key is gone: the old copy opens no more
        # and a sealed secret moved onto another factor does not open either
    with only_new.app.app_context(), pytest.raises(encryption.SealError):
        encryption.unseal(resealed, "another-factor")


def test_a_replayed_code_and_one_from_two_steps_ago_are_refused(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    token = session["access_token"]
    used = code(secret, clock.at)
    assert_auth_error(
        verify(api, token, factor_id, challenge(api, token, factor_id), used), 422, "mfa_verification_failed"
    )
    assert_auth_error(
        verify(api, token, factor_id, challenge(api, token, factor_id), code(secret, clock.at, -2)),
        422,
        "mfa_verification_failed",
    )
    clock.move(30)  # the previous step's code was used already: still refused; the next is good
    assert_auth_error(
        verify(api, token, factor_id, challenge(api, token, factor_id), used), 422, "mfa_verification_failed"
    )
    assert (
        verify(api, token, factor_id, challenge(api, token, factor_id), code(secret, clock.at, 1)).status_code
        == 200
    )
    # a verified challenge is spent, whatever code comes with it
    chal = challenge(api, token, factor_id)
    clock.move(60)
    assert verify(api, token, factor_id, chal, code(secret, clock.at)).status_code == 200
    assert_auth_error(
        verify(api, token, factor_id, chal, code(secret, clock.at, 1)), 422, "mfa_ip_address_mismatch"
    )


def test_a_challenge_takes_five_codes_then_not_even_the_right_one(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    token = session["access_token"]
    clock.move(30)
    chal = challenge(api, token, factor_id)
    right = code(secret, clock.at)
    wrong = [f"{(int(right) + n) % 1_000_000:06d}" for n in range(1, 6)]
    for value in wrong:
        assert_auth_error(verify(api, token, factor_id, chal, value), 422, "mfa_verification_failed")
    assert_auth_error(verify(api, token, factor_id, chal, right), 422, "mfa_challenge_expired")
    assert verify(api, token, factor_id, challenge(api, token, factor_id), right).status_code == 200


def test_an_expired_challenge_is_refused(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    token = session["access_token"]
    chal = challenge(api, token, factor_id)
    clock.move(301)
    assert_auth_error(
        verify(api, token, factor_id, chal, code(secret, clock.at)), 422, "mfa_challenge_expired"
    )
    assert_auth_error(
        verify(api, token, factor_id, chal, code(secret, clock.at)), 422, "mfa_factor_not_found"
    )


def test_another_users_factor_is_not_found(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    bob = api.sign_up("bob@example.com")["access_token"]
    bobs = enroll(api, bob)["id"]
    assert_auth_error(
        api.post(f"/auth/v1/factors/{factor_id}/challenge", token=bob), 404, "mfa_factor_not_found"
    )
    anns_challenge = challenge(api, session["access_token"], factor_id)
    assert_auth_error(
        verify(api, bob, factor_id, anns_challenge, code(secret, clock.at)), 404, "mfa_factor_not_found"
    )
    # Ann's challenge against Bob's own factor: not one of its challenges
    assert_auth_error(
        verify(api, bob, bobs, anns_challenge, code(secret, clock.at)), 422, "mfa_factor_not_found"
    )
    assert_auth_error(api.delete(f"/auth/v1/factors/{factor_id}", token=bob), 404, "mfa_factor_not_found")
    assert_auth_error(api.post(f"/auth/v1/factors/{factor_id}/challenge"), 401, "no_authorization")


def test_unenrolling_a_verified_factor_needs_aal2(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    aal1 = api.sign_in().json["access_token"]
    assert_auth_error(api.delete(f"/auth/v1/factors/{factor_id}", token=aal1), 422, "insufficient_aal")
    enrolling = api.post("/auth/v1/factors", token=aal1, json={"factor_type": "totp", "friendly_name": "two"})
    assert_auth_error(enrolling, 403, "insufficient_aal")
    same_name = api.post(
        "/auth/v1/factors",
        token=session["access_token"],
        json={"factor_type": "totp", "friendly_name": "phone"},
    )
    assert_auth_error(same_name, 422, "mfa_factor_name_conflict")
    removed = api.delete(f"/auth/v1/factors/{factor_id}", token=session["access_token"])
    assert removed.status_code == 200 and removed.json == {"id": factor_id}
    assert "factors" not in api.get("/auth/v1/user", token=aal1).json
    # the session it raised is back to aal1, on its next refresh
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert claims(refreshed.json)["aal"] == "aal1"
    assert [entry["method"] for entry in claims(refreshed.json)["amr"]] == ["password"]


def recovery_session(api, service_key):
    """What a recovery link gives: an aal1 session, by a link that needs no password."""
    admin = Api(api.app, service_key)
    link = admin.post("/auth/v1/admin/generate_link", json={"type": "recovery", "email": "ann@example.com"})
    verified = api.post("/auth/v1/verify", json={"type": "recovery", "token_hash": link.json["hashed_token"]})
    assert verified.status_code == 200, verified.json
    return verified.json["access_token"]


AAL2_NEEDED = "AAL2 session is required to update email or password when MFA is enabled."


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("change", [{"password": "stolen-pw"}, {"email": "thief@example.com"}])
def test_an_aal1_session_cannot_change_the_password_or_address_of_a_user_with_mfa(
    api, service_key, clock, method, change
):
    """A password sign-in or a recovery link alone must not take over an account that has a second
    factor: the change needs an aal2 session (GoTrue's 401 insufficient_aal)."""
    session, factor_id, secret = with_verified_factor(api, clock)
    for aal1 in (api.sign_in().json["access_token"], recovery_session(api, service_key)):
        refused = api.request(method, "/auth/v1/user", token=aal1, json={**change, "first_name": "X"})
        assert assert_auth_error(refused, 401, "insufficient_aal")["msg"] == AAL2_NEEDED
        user = api.get("/auth/v1/user", token=aal1).json
        assert user["email"] == "ann@example.com" and user["user_metadata"].get("first_name") != "X"
    assert api.sign_in().status_code == 200  # the password is the old one
    assert_auth_error(api.sign_in(password="stolen-pw"), 400, "invalid_credentials")
    # What needs no second factor still changes at aal1: metadata, the same address, an empty password.
    aal1 = api.sign_in().json["access_token"]
    kept = api.request(
        method, "/auth/v1/user", token=aal1, json={"email": "ANN@example.com ", "data": {"a": 1}}
    )
    assert kept.status_code == 200 and kept.json["user_metadata"]["a"] == 1
    # The control: the aal2 session makes the same change.
    changed = api.request(method, "/auth/v1/user", token=session["access_token"], json=change)
    assert changed.status_code == 200, changed.json
    if "email" in change:
        assert changed.json["email"] == "thief@example.com"
    else:
        assert api.sign_in(password="stolen-pw").status_code == 200


def test_with_confirmation_on_an_aal1_address_change_is_refused_too(make_app, anon_key, clock):
    """MAILER_AUTOCONFIRM=false takes another path for an address change; the rule holds there too
    (no mail is sent: without SMTP_HOST it would go to the log)."""
    session, factor_id, secret = with_verified_factor(Api(make_app(), anon_key), clock)
    api = Api(make_app(MAILER_AUTOCONFIRM=False), anon_key)  # the same database
    aal1 = api.sign_in().json["access_token"]
    refused = api.put("/auth/v1/user", token=aal1, json={"email": "thief@example.com"})
    assert_auth_error(refused, 401, "insufficient_aal")
    assert api.get("/auth/v1/user", token=aal1).json.get("new_email") in (None, "")
    changed = api.put("/auth/v1/user", token=session["access_token"], json={"email": "new@example.com"})
    assert changed.status_code == 200 and changed.json["new_email"] == "new@example.com"


def test_without_a_verified_factor_an_aal1_session_changes_both(api, clock):
    """The control: no factor, or one never verified, asks for no second factor."""
    token = api.sign_up()["access_token"]
    assert api.put("/auth/v1/user", token=token, json={"password": "second-pw"}).status_code == 200
    enroll(api, token)  # unverified
    aal1 = api.sign_in(password="second-pw").json["access_token"]
    changed = api.patch(
        "/auth/v1/user", token=aal1, json={"password": "third-pw", "email": "ann@new.example"}
    )
    assert changed.status_code == 200 and changed.json["email"] == "ann@new.example"
    assert api.sign_in("ann@new.example", "third-pw").status_code == 200


def test_an_unverified_factor_goes_from_an_aal1_session(api, clock):
    token = api.sign_up()["access_token"]
    factor = enroll(api, token)
    removed = api.delete(f"/auth/v1/factors/{factor['id']}", token=token)
    assert removed.status_code == 200 and removed.json == {"id": factor["id"]}


def test_a_refresh_cannot_raise_the_level(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    aal1 = api.sign_in().json
    body = {"refresh_token": aal1["refresh_token"], "aal": "aal2", "amr": [{"method": "totp"}]}
    assert claims(api.post("/auth/v1/token?grant_type=refresh_token", json=body).json)["aal"] == "aal1"
    forged = jwt.encode({**claims(aal1), "aal": "aal2"}, "another-secret-" + "y" * 40, algorithm="HS256")
    assert_auth_error(api.delete(f"/auth/v1/factors/{factor_id}", token=forged), 401, "bad_jwt")
    with api.app.app_context():
        assert (
            db.session.execute(select(Session.aal).where(Session.id == claims(aal1)["session_id"])).scalar()
            is None
        )


@pytest.mark.parametrize(
    "body, status, error_code",
    [
        ({"factor_type": "sms"}, 400, "validation_failed"),
        ({}, 400, "validation_failed"),
        ({"factor_type": "totp", "friendly_name": "x" * 256}, 400, "validation_failed"),
        ({"factor_type": "totp", "friendly_name": 5}, 400, "validation_failed"),
        ([], 400, "bad_json"),
    ],
)
def test_bad_enrollments(api, body, status, error_code):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.post("/auth/v1/factors", token=token, json=body), status, error_code)


def test_bad_challenges_and_verifies(api, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    token = session["access_token"]
    chal = challenge(api, token, factor_id)
    assert_auth_error(
        api.post("/auth/v1/factors/not-a-uuid/challenge", token=token), 404, "validation_failed"
    )
    url = f"/auth/v1/factors/{factor_id}/verify"
    assert_auth_error(api.post(url, token=token, json={"code": "123456"}), 400, "validation_failed")
    assert_auth_error(
        api.post(url, token=token, json={"challenge_id": chal, "code": ""}), 400, "validation_failed"
    )
    assert_auth_error(
        api.post(url, token=token, json={"challenge_id": chal, "code": 123456}), 400, "validation_failed"
    )
    assert_auth_error(api.post(url, token=token, data="{"), 400, "bad_json")
    assert_auth_error(
        api.post(url, token=token, json={"challenge_id": "nope", "code": "1"}), 422, "mfa_factor_not_found"
    )
    assert_auth_error(verify(api, token, factor_id, chal, "١٢٣٤٥٦"), 422, "mfa_verification_failed")


def test_the_administrator_lists_and_deletes_factors(api, service_key, clock):
    session, factor_id, secret = with_verified_factor(api, clock)
    user_id = int(claims(session)["sub"])
    admin = Api(api.app, service_key)
    uuid_form = f"00000000-0000-0000-0000-{user_id:012d}"
    listed = admin.get(f"/auth/v1/admin/users/{uuid_form}/factors")
    assert listed.status_code == 200
    assert [(f["id"], f["status"]) for f in listed.json] == [(factor_id, "verified")]
    assert "secret" not in listed.json[0]
    assert admin.get("/auth/v1/admin/users?page=1").json["users"][0]["factors"][0]["id"] == factor_id
    assert_auth_error(
        api.get(f"/auth/v1/admin/users/{user_id}/factors", token=session["access_token"]), 403, "not_admin"
    )
    assert_auth_error(admin.get("/auth/v1/admin/users/999/factors"), 404, "user_not_found")
    assert_auth_error(
        admin.delete(f"/auth/v1/admin/users/{user_id}/factors/{'0' * 8}-0000-0000-0000-{'0' * 12}"),
        404,
        "mfa_factor_not_found",
    )
    deleted = admin.delete(f"/auth/v1/admin/users/{user_id}/factors/{factor_id}")
    assert deleted.status_code == 200 and deleted.json["id"] == factor_id
    assert admin.get(f"/auth/v1/admin/users/{user_id}/factors").json == []


def test_a_row_policy_can_require_the_second_factor(make_app, database_url, tmp_path, anon_key, clock):
    """:aal is the session's level: a table only an aal2 session reads."""
    engine = sa.create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE vault (id INTEGER PRIMARY KEY, note VARCHAR(20))"))
        connection.execute(sa.text("INSERT INTO vault VALUES (1, 'launch codes')"))
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(
        '[tables.vault]\nselect = "authenticated"\n[tables.vault.policies]\nselect = ":aal = \'aal2\'"\n'
    )
    api = Api(make_app(TABLES_CONFIG=str(config)), anon_key)
    session, _, _ = with_verified_factor(api, clock)
    signed_in = api.sign_in().json["access_token"]  # a password alone: aal1
    assert api.get("/rest/v1/vault", token=signed_in).json == []
    assert api.get("/rest/v1/vault", token=session["access_token"]).json == [
        {"id": 1, "note": "launch codes"}
    ]
