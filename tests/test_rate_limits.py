"""The auth API's rate limits, per client IP; X-Forwarded-For only behind a configured proxy."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from support import Api, assert_auth_error, serve_app


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


BURST = 50


def burst_of_wrong_passwords(bases, anon_key):
    """BURST wrong passwords for one (IP, email), released together over real HTTP connections
    spread over `bases` (instances); each answer's (status, error_code)."""
    barrier = threading.Barrier(BURST)
    wrong = {"email": "ann@example.com", "password": "wrong-pw"}

    def attempt(n):
        barrier.wait()
        url = f"{bases[n % len(bases)]}/auth/v1/token?grant_type=password"
        response = requests.post(url, json=wrong, headers={"apikey": anon_key}, timeout=60)
        return response.status_code, response.json().get("error_code")

    with ThreadPoolExecutor(BURST) as pool:
        return list(pool.map(attempt, range(BURST)))


def assert_exactly_the_limit_was_evaluated(answers, bases, anon_key):
    assert answers.count((400, "invalid_credentials")) == 10, answers
    assert answers.count((429, "over_request_rate_limit")) == BURST - 10, answers
    for base in bases:  # the right password after them is refused too, on every instance
        right = requests.post(
            f"{base}/auth/v1/token?grant_type=password",
            json={"email": "ann@example.com", "password": "secret-pw"},
            headers={"apikey": anon_key},
            timeout=60,
        )
        assert right.status_code == 429 and right.json()["error_code"] == "over_request_rate_limit"


def test_a_burst_of_wrong_passwords_gets_exactly_ten_evaluated(make_app, anon_key):
    """Fifty at once through a real server: the count was checked before bcrypt and added to after,
    so 16-17 of them were evaluated before the 429. At cost 10 each check takes long enough for
    the others to pile up behind it."""
    app = make_app(RATE_LIMITS=True, BCRYPT_ROUNDS=10)
    Api(app, anon_key).sign_up()
    base, stop = serve_app(app, threads=16)
    try:
        answers = burst_of_wrong_passwords([base], anon_key)
        assert_exactly_the_limit_was_evaluated(answers, [base], anon_key)
    finally:
        stop()


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_burst_over_two_instances_on_one_database_gets_exactly_ten_evaluated(make_app, anon_key):
    apps = [make_app(RATE_LIMITS=True, BCRYPT_ROUNDS=10) for _ in range(2)]
    Api(apps[0], anon_key).sign_up()
    served = [serve_app(app, threads=16) for app in apps]
    bases = [base for base, _ in served]
    try:
        answers = burst_of_wrong_passwords(bases, anon_key)
        assert_exactly_the_limit_was_evaluated(answers, bases, anon_key)
    finally:
        for _, stop in served:
            stop()


def test_a_right_password_inside_the_limit_is_not_counted(limited):
    """The attempt is counted before its check and taken back when the password was right: nine
    failures, then any number of right sign-ins, then one more failure still leaves one to go."""
    limited.sign_up()
    for _ in range(9):
        assert_auth_error(limited.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    for _ in range(3):
        assert limited.sign_in().status_code == 200
    assert_auth_error(limited.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(limited.sign_in(), 429, "over_request_rate_limit")


def test_the_lockout_ends_with_its_window_and_a_new_window_counts_from_one(limited, monkeypatch):
    from auth import tokens

    limited.sign_up()
    for _ in range(10):
        assert_auth_error(limited.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    response = limited.sign_in()
    assert_auth_error(response, 429, "over_request_rate_limit")
    assert 0 < int(response.headers["Retry-After"]) <= 15 * 60
    later = tokens.now() + 15 * 60 + 1
    monkeypatch.setattr(tokens, "now", lambda: later)
    for _ in range(10):
        assert_auth_error(limited.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    assert_auth_error(limited.sign_in(), 429, "over_request_rate_limit")


def test_an_app_counts_on_its_own_store_after_another_found_its_store_down(make_app, anon_key):
    # The limiter is shared by every app in a process; one app's dead store must not make the next
    # count in memory first and switch to its own store half-way (the check comes after 2 s).
    down = Api(make_app(RATE_LIMITS=True, RATE_LIMIT_STORAGE_URI="redis://127.0.0.1:1"), anon_key)
    assert_auth_error(down.sign_in(password="wrong-pw"), 400, "invalid_credentials")
    api = Api(make_app(RATE_LIMITS=True), anon_key)
    session = api.sign_up()
    for n in range(30):
        if n == 15:
            time.sleep(2.5)
        response = api.put("/auth/v1/user", token=session["access_token"], json={"password": f"new-pw-{n}"})
        assert response.status_code == 200, response.json
    response = api.put("/auth/v1/user", token=session["access_token"], json={"password": "one-more"})
    assert_auth_error(response, 429, "over_request_rate_limit")
