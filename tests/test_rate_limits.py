"""The auth API's rate limits, per client IP; X-Forwarded-For only behind a configured proxy."""

import pytest

from support import Api, assert_auth_error


@pytest.fixture
def limited(make_app, anon_key):
    return Api(make_app(RATE_LIMITS=True), anon_key)


def test_sign_up_is_limited_to_30_in_5_minutes(limited):
    for n in range(30):
        body = {"email": f"user{n}@example.com", "password": "secret-pw"}
        assert limited.post("/auth/v1/signup", json=body).status_code == 200
    response = limited.post("/auth/v1/signup", json={"email": "one@more.com", "password": "secret-pw"})
    assert_auth_error(response, 429, "over_request_rate_limit")
    assert int(response.headers["Retry-After"]) > 0


def test_token_endpoint_is_limited_to_150_in_5_minutes(limited):
    for _ in range(150):
        assert limited.post("/auth/v1/token?grant_type=nope", json={}).status_code == 400
    response = limited.post("/auth/v1/token?grant_type=password", json={})
    assert_auth_error(response, 429, "over_request_rate_limit")
    assert "Retry-After" in response.headers


def test_failed_sign_ins_lock_the_ip_and_email_pair_even_for_the_right_password(limited):
    limited.sign_up()
    for _ in range(10):
        assert_auth_error(limited.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    response = limited.sign_in()
    assert_auth_error(response, 429, "over_request_rate_limit")
    assert int(response.headers["Retry-After"]) > 0
    # another email from this IP, and this email from another IP, are not locked
    assert_auth_error(limited.sign_in("bob@example.com", "x-secret"), 400, "invalid_credentials")
    elsewhere = limited.client.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "secret-pw"},
        headers={"apikey": limited.key},
        environ_base={"REMOTE_ADDR": "10.9.8.7"},
    )
    assert elsewhere.status_code == 200


def test_forwarded_for_is_ignored_without_a_trusted_proxy(limited):
    for n in range(10):
        headers = {"X-Forwarded-For": f"192.0.2.{n}"}
        limited.post(
            "/auth/v1/token?grant_type=password",
            json={"email": "ann@example.com", "password": "wrong-pw"},
            headers=headers,
        )
    response = limited.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "wrong-pw"},
        headers={"X-Forwarded-For": "192.0.2.200"},
    )
    assert_auth_error(response, 429, "over_request_rate_limit")


def test_forwarded_for_is_the_client_behind_a_trusted_proxy(make_app, anon_key):
    api = Api(make_app(RATE_LIMITS=True, TRUSTED_PROXIES=1), anon_key)
    for _ in range(10):
        api.post(
            "/auth/v1/token?grant_type=password",
            json={"email": "ann@example.com", "password": "wrong-pw"},
            headers={"X-Forwarded-For": "192.0.2.1"},
        )
    other_client = api.post(
        "/auth/v1/token?grant_type=password",
        json={"email": "ann@example.com", "password": "wrong-pw"},
        headers={"X-Forwarded-For": "192.0.2.2"},
    )
    assert_auth_error(other_client, 400, "invalid_credentials")


def test_rate_limits_off(api):
    for _ in range(12):
        assert_auth_error(api.sign_in(password="wrong-pw"), 400, "invalid_credentials")


def test_an_unreachable_shared_store_falls_back_to_local_limits(make_app, anon_key, caplog):
    api = Api(make_app(RATE_LIMITS=True, RATE_LIMIT_STORAGE_URI="redis://127.0.0.1:1"), anon_key)
    api.sign_up()
    for _ in range(10):
        assert_auth_error(api.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(api.sign_in(), 429, "over_request_rate_limit")


def test_password_changes_are_limited_per_user(limited):
    session = limited.sign_up()
    for n in range(30):
        response = limited.put(
            "/auth/v1/user", token=session["access_token"], json={"password": f"new-pw-{n}"}
        )
        assert response.status_code == 200, response.json
    response = limited.put("/auth/v1/user", token=session["access_token"], json={"password": "one-more"})
    assert_auth_error(response, 429, "over_request_rate_limit")
    # other changes go on
    response = limited.put("/auth/v1/user", token=session["access_token"], json={"first_name": "Ann"})
    assert response.status_code == 200
