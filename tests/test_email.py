"""E-mail flows against a real SMTP server (aiosmtpd on a free port), on both databases: recovery
end to end, codes and links, single use, expiry, the guess limit, the allow list, the rate limit,
confirmation on and off, address changes, an SMTP server that refuses or is down, and no token or
code kept in the database or the log."""

import base64
import hashlib
import re
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from auth import tokens
from mail_server import Inbox, link_and_code
from support import (
    SECRET,
    Api,
    SupabaseJs,
    assert_auth_error,
    free_port,
    gotrue_client,
    listening_socket,
    serve_app,
)

SITE = "https://app.example.com"


@pytest.fixture
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    inbox.port = controller.port
    yield inbox
    controller.stop()


@pytest.fixture
def make_mailing_app(make_app, smtp):
    def make(**overrides):
        settings = {
            "SMTP_HOST": "127.0.0.1",
            "SMTP_PORT": smtp.port,
            "SMTP_SECURITY": "none",
            "SITE_URL": SITE,
            "REDIRECT_ALLOW_LIST": "https://app.example.com/**,myapp://*",
            "API_EXTERNAL_URL": "http://127.0.0.1:9",  # links are followed in-process below
            **overrides,
        }
        return make_app(**settings)

    return make


@pytest.fixture
def api(make_mailing_app, anon_key):
    return Api(make_mailing_app(), anon_key)


def follow(api, link):
    """GET the mailed link in-process: the 303's Location, split into its URL and fragment."""
    parts = urlsplit(link)
    response = api.get(f"{parts.path}?{parts.query}")
    assert response.status_code == 303
    location = response.headers["Location"]
    target, _, fragment = location.partition("#")
    return target, {key: values[0] for key, values in parse_qs(fragment).items()}


def test_recovery_end_to_end(api, smtp):
    api.sign_up()
    assert (
        api.post(
            "/auth/v1/recover?redirect_to=https://app.example.com/reset", json={"email": "ann@example.com"}
        ).json
        == {}
    )
    message = smtp.last("ann@example.com")
    assert message["Subject"] == "Reset your password"
    link, _ = link_and_code(message)
    target, fragment = follow(api, link)
    assert target == "https://app.example.com/reset" and fragment["type"] == "recovery"
    session = fragment["access_token"]
    changed = api.put("/auth/v1/user", token=session, json={"password": "new-secret"})
    assert changed.status_code == 200
    assert_auth_error(api.sign_in(), 400, "invalid_credentials")
    assert api.sign_in(password="new-secret").status_code == 200
    # The link was single use.
    _, again = follow(api, link)
    assert again["error_code"] == "otp_expired" and "access_token" not in again


def test_the_mailed_link_works_in_a_browser_with_no_api_key(api, smtp):
    """A browser following the link cannot add an apikey header: the link alone must do, over HTTP."""
    api.sign_up()
    api.post("/auth/v1/recover?redirect_to=https://app.example.com/reset", json={"email": "ann@example.com"})
    link, _ = link_and_code(smtp.last("ann@example.com"))
    base, stop = serve_app(api.app)
    try:
        parts = urlsplit(link)
        response = requests.get(f"{base}{parts.path}?{parts.query}", allow_redirects=False, timeout=10)
        # Only the link's own route is open: the rest of the API still wants the key.
        refused = requests.get(f"{base}/auth/v1/settings", timeout=10)
    finally:
        stop()
    assert response.status_code == 303, response.text
    target, _, fragment = response.headers["Location"].partition("#")
    assert target == "https://app.example.com/reset"
    assert "access_token" in parse_qs(fragment) and parse_qs(fragment)["type"] == ["recovery"]
    assert refused.status_code == 401


def test_a_code_verifies_once_and_a_token_hash_too(api, smtp):
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    link, code = link_and_code(smtp.last())
    body = {"type": "recovery", "email": "ann@example.com", "token": code}
    session = api.post("/auth/v1/verify", json=body)
    assert session.status_code == 200 and session.json["user"]["email"] == "ann@example.com"
    assert_auth_error(api.post("/auth/v1/verify", json=body), 403, "otp_expired")
    # The link of the same mail died with it: one token, link and code alike.
    token = parse_qs(urlsplit(link).query)["token"][0]
    assert_auth_error(
        api.post("/auth/v1/verify", json={"type": "recovery", "token_hash": token}), 403, "otp_expired"
    )


def test_a_new_token_replaces_the_old_and_a_token_hash_redeems(make_mailing_app, anon_key, smtp):
    api = Api(make_mailing_app(EMAIL_RATE_LIMIT=0), anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    old_link, old_code = link_and_code(smtp.last())
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    new_link, _ = link_and_code(smtp.last())
    old = {"type": "recovery", "email": "ann@example.com", "token": old_code}
    assert_auth_error(api.post("/auth/v1/verify", json=old), 403, "otp_expired")
    token = parse_qs(urlsplit(new_link).query)["token"][0]
    assert api.post("/auth/v1/verify", json={"type": "recovery", "token_hash": token}).status_code == 200


def test_a_token_expires(api, smtp, monkeypatch):
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    _, code = link_and_code(smtp.last())
    later = tokens.now() + 3601
    monkeypatch.setattr(tokens, "now", lambda: later)
    body = {"type": "recovery", "email": "ann@example.com", "token": code}
    assert_auth_error(api.post("/auth/v1/verify", json=body), 403, "otp_expired")


def test_a_code_dies_after_five_wrong_guesses(api, smtp):
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    _, code = link_and_code(smtp.last())
    wrong = f"{(int(code) + 1) % 10**6:06d}"
    for _ in range(5):
        response = api.post(
            "/auth/v1/verify", json={"type": "recovery", "email": "ann@example.com", "token": wrong}
        )
        assert_auth_error(response, 403, "otp_expired")
    right = {"type": "recovery", "email": "ann@example.com", "token": code}
    assert_auth_error(api.post("/auth/v1/verify", json=right), 403, "otp_expired")


@pytest.mark.parametrize(
    ("asked", "used"),
    [
        ("https://app.example.com/reset", "https://app.example.com/reset"),
        ("https://app.example.com/a/b?c=d", "https://app.example.com/a/b?c=d"),
        ("myapp://callback", "myapp://callback"),
        ("https://evil.example/steal", SITE),
        ("https://app.example.com.evil.example/", SITE),
        ("https://evil.example/?https://app.example.com/x", SITE),
        ("myapp://callback/../../evil.example", SITE),
    ],
)
def test_links_lead_only_where_the_allow_list_says(api, smtp, asked, used):
    api.sign_up()
    api.post("/auth/v1/recover", query_string={"redirect_to": asked}, json={"email": "ann@example.com"})
    link, _ = link_and_code(smtp.last())
    assert parse_qs(urlsplit(link).query)["redirect_to"][0] == used
    target, _ = follow(api, f"{link.split('&redirect_to=')[0]}&redirect_to={asked}")
    assert target == used


# The spellings of host 1249763210 (or of `evil`) that a raw-string glob took for a
# subdomain of example.com; every route that redirects must fall back to SITE_URL for each.
HOSTILE = [
    "https://1249763210%3F.example.com/x",
    "https://[2001:db8::1]?.example.com/x",
    "https://evil\\.example.com/x",
]
WILDCARD = {"REDIRECT_ALLOW_LIST": "https://*.example.com/**", "EMAIL_RATE_LIMIT": 0}


def mailed_target(api, smtp, to):
    """The redirect_to that the last mail's link carries, and where following the link leads."""
    link, _ = link_and_code(smtp.last(to))
    target, fragment = follow(api, link)
    return parse_qs(urlsplit(link).query)["redirect_to"][0], target, fragment


def assert_sent_to_the_site(api, smtp, to):
    carried, target, fragment = mailed_target(api, smtp, to)
    assert carried == SITE and target == SITE, (carried, target)
    assert "access_token" in fragment


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_recover_falls_back_to_the_site(make_mailing_app, anon_key, smtp, asked):
    api = Api(make_mailing_app(**WILDCARD), anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", query_string={"redirect_to": asked}, json={"email": "ann@example.com"})
    assert_sent_to_the_site(api, smtp, "ann@example.com")


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_otp_falls_back_to_the_site(make_mailing_app, anon_key, smtp, asked):
    api = Api(make_mailing_app(**WILDCARD), anon_key)
    api.post("/auth/v1/otp", query_string={"redirect_to": asked}, json={"email": "magic@example.com"})
    assert_sent_to_the_site(api, smtp, "magic@example.com")


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_signup_and_resend_falls_back_to_the_site(
    make_mailing_app, anon_key, smtp, asked
):
    api = Api(make_mailing_app(MAILER_AUTOCONFIRM=False, **WILDCARD), anon_key)
    body = {"email": "new@example.com", "password": "secret-pw"}
    assert api.post("/auth/v1/signup", query_string={"redirect_to": asked}, json=body).status_code == 200
    carried, _, _ = mailed_target(api, smtp, "new@example.com")  # following it used the token up
    assert carried == SITE
    api.post("/auth/v1/signup", json={"email": "two@example.com", "password": "secret-pw"})
    api.post(
        "/auth/v1/resend",
        query_string={"redirect_to": asked},
        json={"type": "signup", "email": "two@example.com"},
    )
    assert_sent_to_the_site(api, smtp, "two@example.com")


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_an_address_change_falls_back_to_the_site(
    make_mailing_app, anon_key, smtp, asked
):
    api = Api(make_mailing_app(MAILER_AUTOCONFIRM=False, **WILDCARD), anon_key)
    Api(make_mailing_app(), anon_key).sign_up()
    token = api.sign_in().json["access_token"]
    changed = api.put(
        "/auth/v1/user", token=token, query_string={"redirect_to": asked}, json={"email": "ann@new.example"}
    )
    assert changed.status_code == 200
    assert_sent_to_the_site(api, smtp, "ann@new.example")


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_invite_and_generate_link_falls_back_to_the_site(
    make_mailing_app, anon_key, service_key, smtp, asked
):
    app = make_mailing_app(**WILDCARD)
    api, admin = Api(app, anon_key), Api(app, service_key)
    assert (
        admin.post(
            "/auth/v1/invite", query_string={"redirect_to": asked}, json={"email": "g@example.com"}
        ).status_code
        == 200
    )
    assert_sent_to_the_site(api, smtp, "g@example.com")
    api.sign_up()
    for sent in ({"json": {"redirect_to": asked}}, {"query_string": {"redirect_to": asked}, "json": {}}):
        body = {"type": "magiclink", "email": "ann@example.com", **sent.pop("json")}
        generated = admin.post("/auth/v1/admin/generate_link", json=body, **sent).json
        assert generated["redirect_to"] == SITE
        assert parse_qs(urlsplit(generated["action_link"]).query)["redirect_to"][0] == SITE
        target, fragment = follow(api, generated["action_link"])
        assert target == SITE and "access_token" in fragment


@pytest.mark.parametrize("asked", HOSTILE)
def test_a_hostile_redirect_on_the_mailed_link_itself_falls_back_to_the_site(
    make_mailing_app, anon_key, smtp, asked
):
    """GET /verify checks the redirect_to it is given, not only the one the mail was sent with: a
    link whose redirect_to was edited, or one never mailed by us, lands on SITE_URL too."""
    api = Api(make_mailing_app(**WILDCARD), anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    link, _ = link_and_code(smtp.last("ann@example.com"))
    parts = urlsplit(link)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    response = api.get(parts.path, query_string={**query, "redirect_to": asked})
    assert response.status_code == 303
    target, _, fragment = response.headers["Location"].partition("#")
    assert target == SITE and "access_token=" in fragment
    # A dead link's error goes to the site too.
    response = api.get(parts.path, query_string={**query, "redirect_to": asked})
    assert response.headers["Location"].startswith(f"{SITE}#error=access_denied")


def test_a_wildcard_still_admits_its_own_subdomains_on_every_route(
    make_mailing_app, anon_key, service_key, smtp
):
    """The control: the same routes keep a redirect_to that the pattern does admit."""
    app = make_mailing_app(**WILDCARD)
    api, admin = Api(app, anon_key), Api(app, service_key)
    api.sign_up()
    own = "https://shop.example.com/welcome"
    api.post("/auth/v1/recover", query_string={"redirect_to": own}, json={"email": "ann@example.com"})
    carried, target, fragment = mailed_target(api, smtp, "ann@example.com")
    assert carried == own and target == own and "access_token" in fragment
    api.post("/auth/v1/otp", query_string={"redirect_to": own}, json={"email": "ann@example.com"})
    assert mailed_target(api, smtp, "ann@example.com")[1] == own
    generated = admin.post(
        "/auth/v1/admin/generate_link",
        json={"type": "magiclink", "email": "ann@example.com", "redirect_to": own},
    )
    assert generated.json["redirect_to"] == own


def test_unknown_addresses_get_the_same_answer_and_no_mail(api, smtp):
    response = api.post("/auth/v1/recover", json={"email": "nobody@example.com"})
    assert response.status_code == 200 and response.json == {}
    assert smtp.messages == []


def test_one_mail_per_address_per_minute(make_mailing_app, anon_key, smtp):
    api = Api(make_mailing_app(RATE_LIMITS=True), anon_key)
    api.sign_up()
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    response = api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    assert_auth_error(response, 429, "over_email_send_rate_limit")
    assert int(response.headers["Retry-After"]) > 0
    # An unknown address is limited alike: the 429 tells nothing.
    api.post("/auth/v1/recover", json={"email": "nobody@example.com"})
    assert_auth_error(
        api.post("/auth/v1/recover", json={"email": "nobody@example.com"}), 429, "over_email_send_rate_limit"
    )
    assert len(smtp.messages) == 1


def test_confirmation_on_sign_up(make_mailing_app, anon_key, smtp):
    app = make_mailing_app(MAILER_AUTOCONFIRM=False)
    api = Api(app, anon_key)
    assert api.get("/auth/v1/settings").json["mailer_autoconfirm"] is False
    signed_up = api.post("/auth/v1/signup", json={"email": "new@example.com", "password": "secret-pw"})
    assert signed_up.status_code == 200
    assert "access_token" not in signed_up.json and signed_up.json["email_confirmed_at"] is None
    assert signed_up.json["confirmation_sent_at"] is not None
    assert_auth_error(api.sign_in("new@example.com"), 400, "email_not_confirmed")
    link, _ = link_and_code(smtp.last("new@example.com"))
    _, fragment = follow(api, link)
    assert fragment["type"] == "signup"
    user = api.get("/auth/v1/user", token=fragment["access_token"]).json
    assert user["email_confirmed_at"] is not None
    assert api.sign_in("new@example.com").status_code == 200


def test_users_from_before_confirmation_was_turned_on_count_as_confirmed(make_mailing_app, anon_key, smtp):
    Api(make_mailing_app(), anon_key).sign_up()
    api = Api(make_mailing_app(MAILER_AUTOCONFIRM=False), anon_key)
    assert api.sign_in().status_code == 200


def test_an_address_change_happens_when_the_new_address_confirms(make_mailing_app, anon_key, smtp):
    api = Api(make_mailing_app(MAILER_AUTOCONFIRM=False), anon_key)
    Api(make_mailing_app(), anon_key).sign_up()
    token = api.sign_in().json["access_token"]
    changed = api.put("/auth/v1/user", token=token, json={"email": "ann@new.example", "first_name": "Ann"})
    assert changed.json["email"] == "ann@example.com" and changed.json["new_email"] == "ann@new.example"
    assert changed.json["user_metadata"]["first_name"] == "Ann"
    _, code = link_and_code(smtp.last("ann@new.example"))
    body = {"type": "email_change", "email": "ann@new.example", "token": code}
    assert api.post("/auth/v1/verify", json=body).json["user"]["email"] == "ann@new.example"
    assert api.sign_in("ann@new.example").status_code == 200


def test_magic_link_signs_up_and_in(api, smtp):
    assert (
        api.post("/auth/v1/otp", json={"email": "magic@example.com", "data": {"first_name": "M"}}).json == {}
    )
    link, code = link_and_code(smtp.last("magic@example.com"))
    session = api.post("/auth/v1/verify", json={"type": "email", "email": "magic@example.com", "token": code})
    assert session.status_code == 200 and session.json["user"]["user_metadata"]["first_name"] == "M"
    # GoTrue's answer for an address it may not sign up.
    assert_auth_error(
        api.post("/auth/v1/otp", json={"email": "other@example.com", "create_user": False}),
        422,
        "otp_disabled",
    )
    assert smtp.last().get("To") != "other@example.com"


def test_resend_a_confirmation(make_mailing_app, anon_key, smtp):
    api = Api(make_mailing_app(MAILER_AUTOCONFIRM=False, EMAIL_RATE_LIMIT=0), anon_key)
    api.post("/auth/v1/signup", json={"email": "new@example.com", "password": "secret-pw"})
    first, _ = link_and_code(smtp.last())
    assert api.post("/auth/v1/resend", json={"type": "signup", "email": "new@example.com"}).json == {}
    second, _ = link_and_code(smtp.last())
    assert first != second
    _, dead = follow(api, first)
    assert dead["error_code"] == "otp_expired"
    _, fragment = follow(api, second)
    assert "access_token" in fragment


def test_invite_and_generate_link_are_for_the_service_role(make_mailing_app, anon_key, service_key, smtp):
    app = make_mailing_app()
    api, admin = Api(app, anon_key), Api(app, service_key)
    assert_auth_error(api.post("/auth/v1/invite", json={"email": "guest@example.com"}), 403, "not_admin")
    invited = admin.post("/auth/v1/invite", json={"email": "guest@example.com"})
    assert invited.status_code == 200 and invited.json["email"] == "guest@example.com"
    link, _ = link_and_code(smtp.last("guest@example.com"))
    _, fragment = follow(api, link)
    assert fragment["type"] == "invite"
    accepted = api.put("/auth/v1/user", token=fragment["access_token"], json={"password": "guest-pw"})
    assert accepted.status_code == 200
    sent = len(smtp.messages)
    generated = admin.post(
        "/auth/v1/admin/generate_link", json={"type": "magiclink", "email": "guest@example.com"}
    ).json
    assert len(smtp.messages) == sent  # returned, not sent
    assert generated["verification_type"] == "magiclink" and re.fullmatch(r"\d{6}", generated["email_otp"])
    body = {"type": "magiclink", "token_hash": generated["hashed_token"]}
    assert api.post("/auth/v1/verify", json=body).status_code == 200
    assert_auth_error(
        api.post("/auth/v1/admin/generate_link", json={"type": "magiclink", "email": "guest@example.com"}),
        403,
        "not_admin",
    )


def test_invited_users_carry_invited_at_and_others_do_not(make_mailing_app, anon_key, service_key, smtp):
    app = make_mailing_app()
    api, admin = Api(app, anon_key), Api(app, service_key)
    invited = admin.post("/auth/v1/invite", json={"email": "guest@example.com"}).json
    assert invited["invited_at"].endswith("Z")
    generated = admin.post("/auth/v1/admin/generate_link", json={"type": "invite", "email": "g2@example.com"})
    assert generated.json["invited_at"].endswith("Z")
    assert "invited_at" not in api.sign_up()["user"]  # GoTrue leaves it out for everyone else


@pytest.mark.parametrize("kind", ["email_change_current", "email_change_new"])
def test_generated_email_change_links_change_the_address_once_followed(
    make_mailing_app, anon_key, service_key, smtp, kind
):
    app = make_mailing_app()
    api, admin = Api(app, anon_key), Api(app, service_key)
    api.sign_up()
    link = admin.post("/auth/v1/admin/generate_link", json={"type": kind, "email": "ann@example.com"})
    assert_auth_error(link, 400, "validation_failed")  # new_email is required
    api.sign_up("taken@example.com")
    taken = {"type": kind, "email": "ann@example.com", "new_email": "taken@example.com"}
    assert_auth_error(admin.post("/auth/v1/admin/generate_link", json=taken), 422, "email_exists")
    body = {"type": kind, "email": "ann@example.com", "new_email": "Ann.New@Example.com"}
    generated = admin.post("/auth/v1/admin/generate_link", json=body).json
    assert generated["verification_type"] == kind and generated["new_email"] == "ann.new@example.com"
    assert generated["email"] == "ann@example.com"  # unchanged until the link is followed
    _, fragment = follow(api, generated["action_link"].removeprefix("http://localhost"))
    assert fragment["type"] == "email_change"
    assert api.get("/auth/v1/user", token=fragment["access_token"]).json["email"] == "ann.new@example.com"
    assert api.sign_in("ann.new@example.com").status_code == 200


@pytest.mark.parametrize("fault", ["refused", "down"])
def test_a_mail_that_cannot_be_sent_is_a_503_and_leaves_nothing_usable(
    make_mailing_app, anon_key, smtp, fault
):
    overrides = {"SMTP_PORT": free_port()} if fault == "down" else {}
    app = make_mailing_app(MAILER_AUTOCONFIRM=False, **overrides)
    api = Api(app, anon_key)
    smtp.refuse = fault == "refused"
    response = api.post("/auth/v1/signup", json={"email": "new@example.com", "password": "secret-pw"})
    assert_auth_error(response, 503, "email_send_failed")
    with app.app_context():
        from extensions import db

        count = db.session.execute(sa.text("SELECT COUNT(*) FROM minibase_one_time_tokens")).scalar()
        users = db.session.execute(sa.text("SELECT COUNT(*) FROM users")).scalar()
    assert count == 0 and users == 0
    # Once the server takes mail again, the same sign-up goes through.
    smtp.refuse = False
    if fault == "refused":
        assert (
            api.post(
                "/auth/v1/signup", json={"email": "new@example.com", "password": "secret-pw"}
            ).status_code
            == 200
        )


def test_no_token_or_code_is_kept_in_the_database_or_the_log(make_mailing_app, anon_key, smtp, caplog):
    app = make_mailing_app()
    api = Api(app, anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    link, code = link_and_code(smtp.last())
    token = parse_qs(urlsplit(link).query)["token"][0]
    with app.app_context():
        from extensions import db

        dumped = ""
        for table in ("minibase_one_time_tokens", "minibase_email_sends", "minibase_profiles"):
            dumped += repr(db.session.execute(sa.text(f"SELECT * FROM {table}")).all())
    assert token not in dumped and code not in dumped
    assert token not in caplog.text and code not in caplog.text


def test_without_smtp_the_mail_goes_to_the_log(make_app, anon_key, caplog):
    api = Api(make_app(), anon_key)
    api.sign_up()
    assert "SMTP_HOST is not set" in caplog.text
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    assert "/auth/v1/verify?token=" in caplog.text


def test_the_official_python_client_resets_a_password(make_mailing_app, anon_key, smtp):
    supabase_auth = pytest.importorskip("supabase_auth")
    import httpx

    app = make_mailing_app()
    Api(app, anon_key).sign_up()
    base, stop = serve_app(app)
    try:
        with httpx.Client() as http:
            client = supabase_auth.SyncGoTrueClient(
                url=base + "/auth/v1", headers={"apikey": anon_key}, persist_session=False, http_client=http
            )
            client.reset_password_for_email(
                "ann@example.com", {"redirect_to": "https://app.example.com/reset"}
            )
            _, code = link_and_code(smtp.last())
            verified = client.verify_otp({"email": "ann@example.com", "token": code, "type": "recovery"})
            assert verified.user.email == "ann@example.com"
            client.update_user({"password": "brand-new-pw"})
            signed_in = client.sign_in_with_password({"email": "ann@example.com", "password": "brand-new-pw"})
            assert signed_in.session.access_token
    finally:
        stop()


def test_an_unknown_address_takes_about_as_long_as_a_known_one(make_mailing_app, anon_key, smtp):
    """A slow SMTP server makes a real recovery take a while; an unknown address must not answer at
    once, or its speed would tell that it has no account."""
    import asyncio
    import time

    async def slow(server, session, envelope):
        await asyncio.sleep(0.4)
        return "250 OK"

    smtp.handle_DATA = slow
    api = Api(make_mailing_app(EMAIL_RATE_LIMIT=0), anon_key)
    api.sign_up()
    for _ in range(5):
        api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    started = time.perf_counter()
    assert api.post("/auth/v1/recover", json={"email": "nobody@example.com"}).json == {}
    assert time.perf_counter() - started > 0.2


def test_templates_can_be_replaced_one_by_one(make_mailing_app, anon_key, smtp, tmp_path):
    (tmp_path / "recovery.subject").write_text("Forgot it again, {{ email }}?")
    api = Api(make_mailing_app(EMAIL_TEMPLATES=str(tmp_path)), anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    message = smtp.last()
    assert message["Subject"] == "Forgot it again, ann@example.com?"
    assert "/auth/v1/verify?token=" in message.get_body(("plain",)).get_content()  # the built-in body


def test_a_template_written_for_supabase_reaches_the_app_s_own_confirm_route(
    make_mailing_app, anon_key, smtp, tmp_path
):
    """Supabase's docs have server-rendered apps mail a link to their own route with token_hash, which
    calls verifyOtp({token_hash, type}): GoTrue's variables make that template work unchanged."""
    (tmp_path / "recovery.txt").write_text(
        "Reset: {{ site_url }}/auth/confirm?token_hash={{ token_hash }}&type=recovery"
        "&next={{ redirect_to }}\nor open {{ confirmation_url }}\nor type {{ token }} (sent to {{ email }})\n"
    )
    api = Api(make_mailing_app(EMAIL_TEMPLATES=str(tmp_path)), anon_key)
    api.sign_up()
    api.post("/auth/v1/recover", json={"email": "ann@example.com"})
    text = smtp.last().get_body(("plain",)).get_content()
    found = re.search(r"(\S+)/auth/confirm\?token_hash=([^&]+)&type=recovery&next=(\S+)", text)
    assert found and found.group(1) == SITE and found.group(3) == SITE
    assert "/auth/v1/verify?token=" in text and "(sent to ann@example.com)" in text
    session = api.post("/auth/v1/verify", json={"type": "recovery", "token_hash": found.group(2)})
    assert session.status_code == 200 and session.json["user"]["email"] == "ann@example.com"
    assert re.search(r"or type \d{6} ", text)  # {{ token }} is the 6-digit code


def test_a_pkce_link_that_lives_past_an_hour_still_ends_in_a_code(
    make_mailing_app, anon_key, smtp, monkeypatch
):
    api = Api(make_mailing_app(OTP_EXPIRY=7200), anon_key)
    api.sign_up()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(b"v" * 50).digest()).rstrip(b"=").decode()
    body = {"email": "ann@example.com", "code_challenge": challenge, "code_challenge_method": "s256"}
    assert (
        api.post("/auth/v1/recover?redirect_to=https://app.example.com/reset", json=body).status_code == 200
    )
    link, _ = link_and_code(smtp.last("ann@example.com"))
    start = tokens.now()
    monkeypatch.setattr(tokens, "now", lambda: start + 5400)  # 1.5 h: the link (2 h) is still good
    api.key = None
    target, fragment = follow(api, link)
    assert not fragment and target.startswith("https://app.example.com/reset?code=")


def test_recovery_under_pkce_ends_in_a_code_for_the_verifier_only(api, smtp):
    api.sign_up()
    verifier = "v" * 50
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    body = {"email": "ann@example.com", "code_challenge": challenge, "code_challenge_method": "s256"}
    assert api.post("/auth/v1/recover?redirect_to=https://app.example.com/reset", json=body).json == {}
    link, _ = link_and_code(smtp.last("ann@example.com"))
    api.key = None  # the browser that follows the link sends no API key
    target, fragment = follow(api, link)
    assert not fragment and target.startswith("https://app.example.com/reset?code=")
    code = parse_qs(urlsplit(target).query)["code"][0]
    api.key = tokens.api_key("anon", SECRET)
    grant = "/auth/v1/token?grant_type=pkce"
    assert_auth_error(
        api.post(grant, json={"auth_code": code, "code_verifier": "w" * 50}), 400, "bad_code_verifier"
    )
    assert_auth_error(
        api.post(grant, json={"auth_code": code, "code_verifier": verifier}), 400, "flow_state_not_found"
    )

    assert api.post("/auth/v1/recover", json=body).status_code == 200
    link, _ = link_and_code(smtp.last("ann@example.com"))
    code = parse_qs(urlsplit(follow(api, link)[0]).query)["code"][0]
    session = api.post(grant, json={"auth_code": code, "code_verifier": verifier})
    assert session.status_code == 200 and session.json["user"]["email"] == "ann@example.com"
    assert (
        session.json["access_token"]
        and api.put(
            "/auth/v1/user", token=session.json["access_token"], json={"password": "new-secret"}
        ).status_code
        == 200
    )


@pytest.fixture
def live_mailing(make_mailing_app, anon_key):
    """A mailing app over waitress whose links point at it, with Ann signed up: its base URL."""
    listener = listening_socket()  # the port is held until the server takes it
    port = listener.getsockname()[1]
    app = make_mailing_app(API_EXTERNAL_URL=f"http://127.0.0.1:{port}")
    Api(app, anon_key).sign_up()
    base, stop = serve_app(app, listener=listener)
    yield base
    stop()


def follow_in_a_browser(message):
    """The mailed link followed as a browser does, with no API key: the app's URL it leads to."""
    link, _ = link_and_code(message)
    assert "apikey" not in link
    followed = requests.get(link, allow_redirects=False, timeout=10)
    assert followed.status_code == 303, followed.text
    return followed.headers["Location"]


def test_supabase_js_resets_a_password_under_pkce(live_mailing, anon_key, smtp, node_modules):
    with SupabaseJs(live_mailing, anon_key) as js:
        sent = js("app", "auth.resetPasswordForEmail", "ann@example.com", {"redirectTo": f"{SITE}/reset"})
        assert sent["error"] is None, sent
        target = follow_in_a_browser(smtp.last("ann@example.com"))
        assert target.startswith(f"{SITE}/reset?code=") and "#" not in target
        code = parse_qs(urlsplit(target).query)["code"][0]
        session = js("app", "auth.exchangeCodeForSession", code)
        assert session["error"] is None, session
        assert session["data"]["user"]["email"] == "ann@example.com"
        assert session["data"]["redirectType"] == "recovery"  # supabase-js then says PASSWORD_RECOVERY
        assert js("app", "auth.updateUser", {"password": "brand-new-pw"})["error"] is None
        old = js("other", "auth.signInWithPassword", {"email": "ann@example.com", "password": "secret-pw"})
        assert old["error"]["code"] == "invalid_credentials"
        new = js("other", "auth.signInWithPassword", {"email": "ann@example.com", "password": "brand-new-pw"})
        assert new["error"] is None and new["data"]["session"]["access_token"]
        # The code was used up: the client that started the flow cannot exchange it again.
        again = requests.post(f"{live_mailing}/auth/v1/token?grant_type=pkce", headers={"apikey": anon_key},
                              json={"auth_code": code, "code_verifier": "v" * 43}, timeout=10)  # fmt: skip
        assert again.status_code == 400 and again.json()["error_code"] == "flow_state_not_found"

        # A magic link under PKCE signs a new address up and in the same way.
        asked = js(
            "magic", "auth.signInWithOtp", {"email": "new@example.com", "options": {"emailRedirectTo": SITE}}
        )
        assert asked["error"] is None, asked
        target = follow_in_a_browser(smtp.last("new@example.com"))
        assert target.startswith(f"{SITE}?code=") or target.startswith(f"{SITE}/?code=")
        code = parse_qs(urlsplit(target).query)["code"][0]
        magic = js("magic", "auth.exchangeCodeForSession", code)
        assert magic["error"] is None and magic["data"]["user"]["email"] == "new@example.com"


def test_supabase_py_resets_a_password_under_pkce(live_mailing, anon_key, smtp):
    pytest.importorskip("supabase_auth")
    import httpx
    from supabase_auth.errors import AuthApiError

    with httpx.Client() as http:
        client = gotrue_client(live_mailing, anon_key, http, flow_type="pkce")
        client.reset_password_for_email("ann@example.com", {"redirect_to": f"{SITE}/reset"})
        target = follow_in_a_browser(smtp.last("ann@example.com"))
        code = parse_qs(urlsplit(target).query)["code"][0]
        session = client.exchange_code_for_session({"auth_code": code})
        assert session.user.email == "ann@example.com" and session.session.access_token
        client.update_user({"password": "brand-new-pw"})
        with pytest.raises(AuthApiError) as old:
            client.sign_in_with_password({"email": "ann@example.com", "password": "secret-pw"})
        assert old.value.code == "invalid_credentials"
        signed_in = client.sign_in_with_password({"email": "ann@example.com", "password": "brand-new-pw"})
        assert signed_in.session.access_token


# --- reauthentication: GET /reauthenticate and SECURE_PASSWORD_CHANGE, as GoTrue does them: a
# password change from a session older than 24 hours needs the nonce mailed to the user, once.

DAY = 24 * 3600


@pytest.fixture
def clock(monkeypatch):
    """The service's clock; `clock.move(seconds)` moves it forward."""

    class Clock:
        offset = 0

        def move(self, seconds):
            self.offset += seconds

    moved = Clock()
    real = tokens.now
    monkeypatch.setattr(tokens, "now", lambda: real() + moved.offset)
    return moved


def nonce_in(message):
    assert message["Subject"] == "Confirm it is you"
    return re.search(r"\b(\d{6})\b", message.get_body(("plain",)).get_content()).group(1)


def refreshed(api, session):
    response = api.post(
        "/auth/v1/token?grant_type=refresh_token", json={"refresh_token": session["refresh_token"]}
    )
    assert response.status_code == 200, response.json
    return response.json


def test_a_password_change_from_an_old_session_needs_the_mailed_nonce(
    make_mailing_app, anon_key, smtp, clock
):
    api = Api(make_mailing_app(SECURE_PASSWORD_CHANGE=True), anon_key)
    session = api.sign_up()
    # A session younger than a day changes the password without a nonce, as at GoTrue.
    assert (
        api.put("/auth/v1/user", token=session["access_token"], json={"password": "second-pw"}).status_code
        == 200
    )
    clock.move(DAY + 60)
    session = refreshed(api, session)
    token = session["access_token"]
    needed = api.put("/auth/v1/user", token=token, json={"password": "third-pw"})
    assert_auth_error(needed, 400, "reauthentication_needed")
    assert needed.json["msg"] == "Password update requires reauthentication"
    assert_auth_error(
        api.put("/auth/v1/user", token=token, json={"password": "third-pw", "nonce": "123456"}),
        422,
        "reauthentication_not_valid",
    )
    assert api.get("/auth/v1/reauthenticate", token=token).json == {}
    nonce = nonce_in(smtp.last("ann@example.com"))
    wrong = f"{(int(nonce) + 1) % 10**6:06d}"
    invalid = api.put("/auth/v1/user", token=token, json={"password": "third-pw", "nonce": wrong})
    assert_auth_error(invalid, 422, "reauthentication_not_valid")
    assert invalid.json["msg"] == "Nonce has expired or is invalid"
    assert (
        api.put("/auth/v1/user", token=token, json={"password": "third-pw", "nonce": nonce}).status_code
        == 200
    )
    assert api.sign_in(password="third-pw").status_code == 200
    # Single use; and other changes than the password need none.
    assert_auth_error(
        api.put("/auth/v1/user", token=token, json={"password": "fourth-pw", "nonce": nonce}),
        422,
        "reauthentication_not_valid",
    )
    assert api.put("/auth/v1/user", token=token, json={"data": {"pet": "cat"}}).status_code == 200


def test_a_nonce_is_the_users_own_and_expires(make_mailing_app, anon_key, smtp, clock):
    api = Api(make_mailing_app(SECURE_PASSWORD_CHANGE=True, OTP_EXPIRY=600, EMAIL_RATE_LIMIT=0), anon_key)
    ann, bob = api.sign_up(), api.sign_up(email="bob@example.com")
    clock.move(DAY + 60)
    ann, bob = refreshed(api, ann), refreshed(api, bob)
    api.get("/auth/v1/reauthenticate", token=bob["access_token"])
    bobs = nonce_in(smtp.last("bob@example.com"))
    stolen = api.put("/auth/v1/user", token=ann["access_token"], json={"password": "third-pw", "nonce": bobs})
    assert_auth_error(stolen, 422, "reauthentication_not_valid")
    api.get("/auth/v1/reauthenticate", token=ann["access_token"])
    anns = nonce_in(smtp.last("ann@example.com"))
    clock.move(601)
    ann = refreshed(api, ann)
    late = api.put("/auth/v1/user", token=ann["access_token"], json={"password": "third-pw", "nonce": anns})
    assert_auth_error(late, 422, "reauthentication_not_valid")


def test_without_secure_password_change_no_nonce_is_asked(make_mailing_app, anon_key, smtp, clock):
    api = Api(make_mailing_app(), anon_key)
    session = api.sign_up()
    clock.move(DAY + 60)
    token = refreshed(api, session)["access_token"]
    assert api.put("/auth/v1/user", token=token, json={"password": "second-pw"}).status_code == 200


def test_reauthenticate_is_for_signed_in_users_only(make_mailing_app, anon_key, service_key, smtp):
    api = Api(make_mailing_app(), anon_key)
    assert_auth_error(api.get("/auth/v1/reauthenticate"), 401, "no_authorization")
    assert_auth_error(api.get("/auth/v1/reauthenticate", token=service_key), 401, "bad_jwt")
    assert_auth_error(api.get("/auth/v1/reauthenticate", token="not.a.token"), 401, "bad_jwt")
    assert smtp.messages == []


def test_supabase_js_reauthenticates_a_password_change(make_mailing_app, anon_key, smtp, clock, node_modules):
    listener = listening_socket()  # the port is held until the server takes it
    port = listener.getsockname()[1]
    app = make_mailing_app(SECURE_PASSWORD_CHANGE=True, API_EXTERNAL_URL=f"http://127.0.0.1:{port}")
    base, stop = serve_app(app, listener=listener)
    try:
        with SupabaseJs(base, anon_key) as js:
            assert (
                js("app", "auth.signUp", {"email": "js@example.com", "password": "secret-pw"})["error"]
                is None
            )
            clock.move(DAY + 60)
            assert js("app", "auth.refreshSession")["error"] is None
            needed = js("app", "auth.updateUser", {"password": "brand-new-pw"})
            assert needed["error"]["code"] == "reauthentication_needed"
            assert js("app", "auth.reauthenticate")["error"] is None
            nonce = nonce_in(smtp.last("js@example.com"))
            changed = js("app", "auth.updateUser", {"password": "brand-new-pw", "nonce": nonce})
            assert changed["error"] is None and changed["data"]["user"]["email"] == "js@example.com"
            signed_in = js(
                "other", "auth.signInWithPassword", {"email": "js@example.com", "password": "brand-new-pw"}
            )
            assert signed_in["error"] is None
    finally:
        stop()


def test_mails_sent_and_failed_are_counted(make_mailing_app, anon_key, service_key, smtp):
    from prometheus_client.parser import text_string_to_metric_families

    def counted(app):
        text = app.test_client().get("/metrics", headers={"apikey": service_key}).get_data(as_text=True)
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in ("minibase_mails_sent_total", "minibase_mails_failed_total")
        }

    app = make_mailing_app(METRICS=True, MAILER_AUTOCONFIRM=False)
    api = Api(app, anon_key)
    before = counted(app)
    api.sign_up()  # a confirmation mail
    assert api.post("/auth/v1/recover", json={"email": "ann@example.com"}).status_code == 200
    closed = make_mailing_app(METRICS=True, MAILER_AUTOCONFIRM=False, SMTP_PORT=free_port())
    credentials = {"email": "bo@example.com", "password": "pw-123456"}
    signup = Api(closed, anon_key).post("/auth/v1/signup", json=credentials)
    assert signup.status_code == 503  # the confirmation could not be sent
    after = counted(app)
    assert after["minibase_mails_sent_total"] - before.get("minibase_mails_sent_total", 0) == len(
        smtp.messages
    )
    assert len(smtp.messages) == 2
    assert after["minibase_mails_failed_total"] - before.get("minibase_mails_failed_total", 0) == 1
