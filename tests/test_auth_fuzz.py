"""Whatever a client sends to the auth and admin APIs, on either database, the answer is a documented
4xx (or a 2xx), never a 5xx: any JSON (NaN, lone surrogates, any nesting), any bytes, any header."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import Api

TEXT = st.text(st.characters(exclude_categories=()), max_size=80)  # lone surrogates included
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = ["email", "password", "data", "refresh_token", "username", "first_name", "about", "phone", "nonce",
          "active", "user_metadata", "ban_duration", "app_metadata"]  # fmt: skip
bodies = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5),
    st.fixed_dictionaries(
        {"email": st.sampled_from(["ann@example.com", "ANN@example.com ", "x@y"]), "password": json_values}
    ),
)
REQUESTS = [
    ("POST", "/auth/v1/signup"),
    ("POST", "/auth/v1/token?grant_type=password"),
    ("POST", "/auth/v1/token?grant_type=refresh_token"),
    ("PATCH", "/auth/v1/user"),
    ("PUT", "/auth/v1/user"),
    ("POST", "/auth/v1/admin/users"),
    ("PUT", "/auth/v1/admin/users/1"),
]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def fuzzed(make_app, anon_key, service_key):
    app = make_app()
    api = Api(app, anon_key)
    return api, api.sign_up()["access_token"], Api(app, service_key)


@FUZZ
@given(request=st.sampled_from(REQUESTS), body=bodies)
def test_any_json_body(fuzzed, request, body):
    api, token, admin = fuzzed
    method, path = request
    if "/admin/" in path:
        response = admin.request(method, path, json=body)
    else:
        response = api.request(method, path, json=body, token=token if "user" in path else None)
    assert response.status_code < 500, (body, response.get_json())
    assert response.is_json


@FUZZ
@given(
    raw=st.binary(max_size=200),
    header=st.text(st.characters(exclude_characters="\r\n"), max_size=60),  # no header can hold these
    query=st.text(max_size=40),
)
def test_any_bytes_header_and_query(fuzzed, raw, header, query):
    api, _, _ = fuzzed
    response = api.request(
        "POST",
        "/auth/v1/token",
        query_string={"grant_type": query},
        data=raw,
        headers={"Authorization": header.encode("utf-8", "ignore").decode("latin-1")},
    )
    assert response.status_code < 500 and response.is_json
    response = api.request("GET", "/auth/v1/user", headers={"Authorization": "Bearer " + header})
    assert response.status_code == 401 and response.is_json
