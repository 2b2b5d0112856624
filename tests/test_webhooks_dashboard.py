"""The dashboard's Webhooks page: the hooks, schedules, deliveries with their attempts and runs, for
a signed-in administrator only; a failed delivery sent again with the session's CSRF token only."""

import time

import sqlalchemy as sa

from blueprints.dashboard.base import COOKIE
from dashboard import sessions
from extensions import db
from receiver import SECRET
from support import Api
from webhooks import outbox

TOML = f"""
[webhooks.orders_out]
table = "orders"
url = "http://127.0.0.1:9/orders"
secret = "{SECRET}"

[schedules.nightly]
cron = "@daily"
sql = "DELETE FROM orders WHERE 1 = 0"
"""


def admin_client(app, service_key, email="boss@example.com", role="admin"):
    api = Api(app, service_key)
    made = api.post(
        "/auth/v1/admin/users", json={"email": email, "password": "secret-pw", "email_confirm": True}
    )
    assert made.status_code == 200, made.get_json()
    user_id = made.get_json()["id"]
    api.put(f"/auth/v1/admin/users/{user_id}", json={"app_metadata": {"role": role}})
    client = app.test_client()
    with app.app_context():
        token, _ = sessions.sign_in(email, "secret-pw", "127.0.0.1")
        csrf = sessions.current(token).csrf
    client.set_cookie(COOKIE, token, path="/dashboard")
    return client, csrf


def failed_delivery(app):
    with app.app_context(), db.engine.begin() as connection:
        connection.execute(
            sa.insert(outbox.DELIVERIES).values(
                hook="orders_out", event_id=1, status="failed", attempts=3, created_at=time.time() - 99,
                next_at=time.time(), last_status=500, last_error="answered 500 <script>x</script>",
                payload='{"type":"INSERT","table":"orders","schema":"public","record":{"id":1},"old_record":null}',
            )
        )  # fmt: skip
        return connection.execute(sa.select(outbox.DELIVERIES.c.id)).scalar_one()


def test_the_page_shows_hooks_schedules_and_deliveries_and_sends_a_failed_one_again(
    make_app, tmp_path, service_key
):
    config = tmp_path / "tables.toml"
    config.write_text(TOML)
    app = make_app(TABLES_CONFIG=str(config))
    delivery_id = failed_delivery(app)
    client, csrf = admin_client(app, service_key)
    shown = client.get("/dashboard/webhooks")
    text = shown.get_data(as_text=True)
    assert shown.status_code == 200
    assert "orders_out" in text and "nightly" in text and "0 0 * * *" in text and "Send again" in text
    assert "<script>x</script>" not in text and "&lt;script&gt;" in text  # shown as text
    path = f"/dashboard/webhooks/deliveries/{delivery_id}/resend"
    assert client.post(path, data={}).status_code == 403  # no CSRF token
    assert client.post(path, data={"csrf": "forged"}).status_code == 403
    with app.app_context():
        assert outbox.listing()[0]["status"] == "failed"
    sent = client.post(path, data={"csrf": csrf})
    assert sent.status_code == 303
    with app.app_context():
        assert outbox.listing()[0]["status"] == "pending"
    assert client.post(path, data={"csrf": csrf}).status_code == 409  # no longer failed


def test_the_page_is_for_administrators_only(make_app, tmp_path, service_key, anon_key):
    app = make_app()
    anonymous = app.test_client()
    assert anonymous.get("/dashboard/webhooks").status_code == 303  # to the sign-in page
    assert anonymous.post("/dashboard/webhooks/deliveries/1/resend").status_code == 401
    keyed = anonymous.get(
        "/dashboard/webhooks", headers={"apikey": service_key, "Authorization": f"Bearer {service_key}"}
    )
    assert keyed.status_code == 303  # an API key is no dashboard session
    client, _ = admin_client(app, service_key)
    assert client.get("/dashboard/webhooks").status_code == 200
