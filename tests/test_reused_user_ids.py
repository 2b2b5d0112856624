"""A user id given out again inherits nothing of the user who had it. The application that owns the
users table deletes its users itself (minibase's own rows of them stay), and the id is taken again:
SQLite reuses the highest free rowid, a MariaDB AUTO_INCREMENT does once reset. The next user made
under that id starts clean: no sessions or refresh tokens of the earlier one, no app_metadata (an
admin role), no ban, no factors, no profile."""

from sqlalchemy import text

from extensions import db
from support import Api, assert_auth_error


def deleted_by_another_program(app, backend, user_id):
    with app.app_context():
        db.session.execute(text("DELETE FROM users WHERE user_id = :id"), {"id": user_id})
        if backend == "mysql":
            db.session.execute(text("ALTER TABLE users AUTO_INCREMENT = 1"))
        db.session.commit()


def test_a_user_given_a_deleted_users_id_inherits_nothing(app, api, service_key, backend):
    service = Api(app, service_key)
    ann = api.sign_up("ann@example.com", about="ann's own words")
    ann_id, ann_token = ann["user"]["id"], ann["access_token"]
    granted = service.put(f"/auth/v1/admin/users/{ann_id}", json={"app_metadata": {"role": "admin"}})
    assert granted.status_code == 200, granted.json
    enrolled = api.post("/auth/v1/factors", token=ann_token, json={"factor_type": "totp"})
    assert enrolled.status_code == 200, enrolled.json
    deleted_by_another_program(app, backend, ann_id)

    bob = api.sign_up("bob@example.com")
    assert bob["user"]["id"] == ann_id  # the id is really given out again
    assert "role" not in bob["user"]["app_metadata"]
    assert bob["user"]["user_metadata"].get("about") is None
    assert_auth_error(api.get("/auth/v1/user", token=ann_token), 401, "session_not_found")
    refreshed = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": ann["refresh_token"]}
    )
    assert_auth_error(refreshed, 400, "refresh_token_not_found")
    own = api.get("/auth/v1/user", token=bob["access_token"])
    assert own.status_code == 200 and own.json["email"] == "bob@example.com"
    assert own.json.get("factors") in (None, [])
    assert "role" not in service.get(f"/auth/v1/admin/users/{ann_id}").json["app_metadata"]
