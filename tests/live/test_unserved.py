"""Where no socket can be held, /realtime/v1 says so in a JSON 501 rather than a 404 (the CGI and
Passenger cases are in tests/test_deploy.py)."""

from support import assert_rest_error


def test_realtime_off_answers_501_with_the_reason(make_app, anon_key):
    app = make_app(REALTIME=False)
    client = app.test_client()
    response = client.get("/realtime/v1/websocket?vsn=1.0.0", headers={"apikey": anon_key})
    assert_rest_error(response, 501)
    assert response.json["message"] == "Realtime is not available: REALTIME is off"
    assert_rest_error(client.post("/realtime/v1/api/broadcast", headers={"apikey": anon_key}, json={}), 501)


def test_the_api_key_comes_first(make_app):
    response = make_app().test_client().get("/realtime/v1/websocket")
    assert_rest_error(response, 401)
    assert response.json["message"] == "No API key found in request"
