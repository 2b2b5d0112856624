"""The audit log, on both databases: every auth event (sign-in, failed sign-in, lockout, password
change, ban, deletion, factor change) from /auth/v1 and the admin API, with actor, IP and time;
`GET /auth/v1/admin/audit` for the service key only, searchable and paged; an entry commits with
what it records, or neither does."""

import re

import pyotp
import pytest

from auth import administration
from support import Api, assert_auth_error


@pytest.fixture
def admin(app, service_key):
    return Api(app, service_key)


def entries(admin, query=""):
    answer = admin.get(f"/auth/v1/admin/audit?q={query}&per_page=100")
    assert answer.status_code == 200, answer.json
    return answer.json["entries"]


def test_auth_events_are_recorded_with_actor_ip_and_time(api, admin):
    user_id = api.sign_up("ann@example.com")["user"]["id"]
    assert api.sign_in("ann@example.com", "wrong-password").status_code == 400
    token = api.sign_in().json["access_token"]
    assert api.put("/auth/v1/user", token=token, json={"password": "new-secret-pw"}).status_code == 200
    factor = api.post("/auth/v1/factors", token=token, json={"factor_type": "totp"}).json
    challenge = api.post(f"/auth/v1/factors/{factor['id']}/challenge", token=token).json
    code = pyotp.TOTP(factor["totp"]["secret"]).now()
    body = {"challenge_id": challenge["id"], "code": code}
    assert api.post(f"/auth/v1/factors/{factor['id']}/verify", token=token, json=body).status_code == 200
    assert admin.delete(f"/auth/v1/admin/users/{user_id}/factors/{factor['id']}").status_code == 200
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"ban_duration": "2h"}).status_code == 200
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"ban_duration": "none"}).status_code == 200
    assert admin.delete(f"/auth/v1/admin/users/{user_id}").status_code == 200

    found = entries(admin)
    actions = [(entry["action"], entry["actor"], entry["via"]) for entry in reversed(found)]
    assert actions == [
        ("sign_in", "ann@example.com", "auth"),  # the sign-up's session
        ("sign_in_failed", "ann@example.com", "auth"),
        ("sign_in", "ann@example.com", "auth"),
        ("password_change", "ann@example.com", "auth"),
        ("factor_enrolled", "ann@example.com", "auth"),
        ("factor_verified", "ann@example.com", "auth"),
        ("factor_removed", "service_role", "admin"),
        ("ban", "service_role", "admin"),
        ("unban", "service_role", "admin"),
        ("user_deleted", "service_role", "admin"),
    ]
    for entry in found:
        assert entry["ip"] == "127.0.0.1"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["created_at"])
    assert found[0]["target"] == f"user {user_id} (ann@example.com)"
    assert found[2]["details"]["until"]  # the ban's end
    for secret in ("secret-pw", "wrong-password", "$2b$", factor["totp"]["secret"]):
        assert secret not in str(found)  # no password, hash or factor secret in any entry


def test_a_ban_and_a_deletion_are_found_by_the_users_address_after_the_user_is_gone(api, admin):
    user_id = api.sign_up("ann@example.com")["user"]["id"]
    api.sign_up("bob@example.com")
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"ban_duration": "2h"}).status_code == 200
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"app_metadata": {"team": 1}}).status_code == 200
    assert admin.delete(f"/auth/v1/admin/users/{user_id}").status_code == 200
    found = {entry["action"]: entry["target"] for entry in entries(admin, "ann@example.com")}
    target = f"user {user_id} (ann@example.com)"
    assert found == {"sign_in": target, "ban": target, "app_metadata_change": target, "user_deleted": target}
    assert "bob@example.com" not in str(found)


def test_the_lockout_is_recorded_once_when_it_starts(make_app, anon_key, service_key):
    app = make_app(RATE_LIMITS=True)
    api, admin = Api(app, anon_key), Api(app, service_key)
    api.sign_up("bob@example.com")
    for _ in range(11):
        api.sign_in("bob@example.com", "wrong-password")
    actions = [entry["action"] for entry in entries(admin, "bob@")]
    assert actions.count("lockout") == 1 and actions.count("sign_in_failed") == 10


def test_only_the_service_role_reads_the_log(api, admin):
    token = api.sign_up()["access_token"]
    assert_auth_error(api.get("/auth/v1/admin/audit"), 403, "not_admin")
    assert_auth_error(api.get("/auth/v1/admin/audit", token=token), 403, "not_admin")
    assert_auth_error(api.get("/auth/v1/admin/audit?per_page=0", token=token), 403, "not_admin")
    assert admin.get("/auth/v1/admin/audit").status_code == 200


def test_search_and_pages(api, admin):
    for name in ("cat", "dog", "cow"):
        api.sign_up(f"{name}@example.com")
    assert [entry["actor"] for entry in entries(admin, "CA")] == ["cat@example.com"]
    assert entries(admin, "%") == [] and entries(admin, "a_p") == []  # wildcards are plain text ("ample")
    page = admin.get("/auth/v1/admin/audit?page=2&per_page=1")
    assert page.headers["X-Total-Count"] == "3"
    assert [entry["actor"] for entry in page.json["entries"]] == ["dog@example.com"]
    for bad in ("page=0", "per_page=1001", "page=x", "q=" + "x" * 201):
        assert_auth_error(admin.get(f"/auth/v1/admin/audit?{bad}"), 400, "validation_failed")


def test_an_entry_commits_with_what_it_records_or_neither_does(app, api, admin, monkeypatch):
    user_id = api.sign_up("dan@example.com")["user"]["id"]

    def broken(*args, **kwargs):
        raise RuntimeError("the profile write fails after the ban was recorded")

    monkeypatch.setattr(administration, "upsert", broken)
    app.config["PROPAGATE_EXCEPTIONS"] = False
    assert admin.put(f"/auth/v1/admin/users/{user_id}", json={"ban_duration": "2h"}).status_code == 500
    monkeypatch.undo()
    assert [entry["action"] for entry in entries(admin)] == ["sign_in"]
    assert admin.get(f"/auth/v1/admin/users/{user_id}").json["banned_until"] is None


def test_the_command_line_grants_and_revokes_the_dashboard(app, api, admin):
    user_id = api.sign_up("eve@example.com")["user"]["id"]
    runner = app.test_cli_runner()
    granted = runner.invoke(args=["admin", "grant", "Eve@Example.com"])
    assert granted.exit_code == 0, granted.output
    assert admin.get(f"/auth/v1/admin/users/{user_id}").json["app_metadata"]["role"] == "admin"
    assert runner.invoke(args=["admin", "revoke", "eve@example.com"]).exit_code == 0
    assert "role" not in admin.get(f"/auth/v1/admin/users/{user_id}").json["app_metadata"]
    assert runner.invoke(args=["admin", "grant", "nobody@example.com"]).exit_code != 0
    cli = [entry for entry in entries(admin) if entry["via"] == "cli"]
    assert [(entry["action"], entry["actor"]) for entry in cli] == [("app_metadata_change", "cli")] * 2


def test_alongside_joins_the_first_unit_that_commits_and_no_other(app, admin):
    from auth import audit
    from database import transactions
    from extensions import db

    def refused():
        db.session.execute(db.text("SELECT 1"))
        raise RuntimeError("the unit fails")

    ran = []
    with app.app_context():
        with transactions.alongside(lambda: ran.append("run") or audit.record("tested", "alongside")):
            transactions.read(lambda: None)  # a read commits nothing: not there
            with pytest.raises(RuntimeError):
                transactions.write(refused)  # a unit that fails: not there either
            assert ran == []
            transactions.write(lambda: None)
            transactions.write(lambda: None)  # a later unit: not again
        transactions.write(lambda: None)  # outside the block: never
        db.session.remove()
    assert ran == ["run"]
    assert [entry["target"] for entry in entries(admin, "tested")] == ["alongside"]
