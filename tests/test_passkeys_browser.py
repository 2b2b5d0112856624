"""Passkeys and WebAuthn factors in a real browser: Debian's Chromium with a virtual authenticator (the
DevTools protocol's WebAuthn domain, through Playwright), and supabase-js's own bundle in the page:
registerPasskey() and signInWithPasskey(), mfa.webauthn.register() and authenticate(), as an app
calls them. A page of another origin, and a replayed ceremony, are refused by the server."""

import http.server
import threading
from pathlib import Path

import pytest

from support import Api, free_port, listening_socket, serve_app

pytestmark = pytest.mark.slow

JS = Path(__file__).resolve().parent / "js"
PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>app</title>
<script src="/supabase.js"></script></head><body>app</body></html>"""


class Site(http.server.BaseHTTPRequestHandler):
    """The app's origin: a page and supabase-js's browser bundle."""

    def do_GET(self):
        if self.path == "/supabase.js":
            body, kind = (
                (JS / "node_modules/@supabase/supabase-js/dist/umd/supabase.js").read_bytes(),
                "text/javascript",
            )
        else:
            body, kind = PAGE, "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_site(port):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def world(make_app, anon_key, node_modules):
    port, other_port = free_port(), free_port()
    origin = f"http://localhost:{port}"
    app = make_app(
        PASSKEY_ENABLED=True,
        MFA_WEB_AUTHN_ENROLL_ENABLED=True,
        MFA_WEB_AUTHN_VERIFY_ENABLED=True,
        SITE_URL=origin,
        WEBAUTHN_RP_ID="localhost",
    )
    base, stop = serve_app(app)
    sites = [start_site(port), start_site(other_port)]
    yield {
        "base": base,
        "origin": origin,
        "other": f"http://localhost:{other_port}",
        "api": Api(app, anon_key),
    }
    for site in sites:
        site.shutdown()
        site.server_close()
    stop()


def open_page(chromium, url, credentials=(), transport="internal"):
    """A tab at `url` with a virtual authenticator holding `credentials`, a platform one or (usb) a
    security key; (page, cdp, id)."""
    context = chromium.new_context()
    page = context.new_page()
    page.goto(url)
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    options = {"protocol": "ctap2", "transport": transport, "hasResidentKey": True,
               "hasUserVerification": True, "isUserVerified": True,
               "automaticPresenceSimulation": True}  # fmt: skip
    authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": options})["authenticatorId"]
    for credential in credentials:
        cdp.send("WebAuthn.addCredential", {"authenticatorId": authenticator, "credential": credential})
    return page, cdp, authenticator


CLIENT = """([base, key]) => {
  window.sb = supabase.createClient(base, key, {
    auth: { persistSession: false, autoRefreshToken: false, experimental: { passkey: true } },
  })
}"""
PLAIN = """(r) => ({
  user: r.data && r.data.user ? r.data.user.email : null,
  error: r.error && (r.error.code || r.error.message),
})"""


def call(page, script):
    return page.evaluate(f"async () => {{ const r = await ({script}); return ({PLAIN})(r) }}")


def test_a_page_registers_a_passkey_and_signs_in_with_it(chromium, world, anon_key):
    page, cdp, authenticator = open_page(chromium, world["origin"])
    page.evaluate(CLIENT, [world["base"], anon_key])
    signed_up = call(page, "sb.auth.signUp({ email: 'ann@example.com', password: 'secret-pw' })")
    assert signed_up == {"user": "ann@example.com", "error": None}
    registered = page.evaluate(
        "async () => { const r = await sb.auth.registerPasskey(); return r.error && r.error.message }"
    )
    assert registered is None
    stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]
    assert len(stored) == 1 and stored[0]["rpId"] == "localhost" and stored[0]["isResidentCredential"]
    page.evaluate("async () => { await sb.auth.signOut() }")
    assert call(page, "sb.auth.signInWithPasskey()") == {"user": "ann@example.com", "error": None}
    assert page.evaluate("async () => (await sb.auth.getUser()).data.user.email") == "ann@example.com"

    # The same ceremony by hand, its assertion sent twice: the second is refused.
    replay = page.evaluate("""async () => {
      const { data } = await sb.auth.passkey.startAuthentication()
      const got = await navigator.credentials.get({
        publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(data.options) })
      const body = { challengeId: data.challenge_id, credential: got.toJSON() }
      const first = await sb.auth.passkey.verifyAuthentication(body)
      const second = await sb.auth.passkey.verifyAuthentication(body)
      return [first.error && first.error.code, second.error && second.error.code]
    }""")
    assert replay == [None, "webauthn_challenge_not_found"]

    # A page of another origin (same RP id, a port the server does not list), holding the same key.
    other, other_cdp, other_authenticator = open_page(chromium, world["other"], credentials=stored)
    other.evaluate(CLIENT, [world["base"], anon_key])
    refused = call(other, "sb.auth.signInWithPasskey()")
    assert refused == {"user": None, "error": "webauthn_verification_failed"}
    # There, registering with no authenticator holding the key (the browser itself refuses to make
    # a credential the options exclude, before the server could).
    cdp.send("WebAuthn.clearCredentials", {"authenticatorId": authenticator})
    other_cdp.send("WebAuthn.clearCredentials", {"authenticatorId": other_authenticator})
    password = "sb.auth.signInWithPassword({ email: 'ann@example.com', password: 'secret-pw' })"
    assert call(other, password)["error"] is None
    registering = "async () => { const r = await sb.auth.registerPasskey(); return r.error && r.error.code }"
    assert other.evaluate(registering) == "webauthn_verification_failed"
    token = world["api"].sign_in().json["access_token"]
    assert len(world["api"].get("/auth/v1/passkeys", token=token).json) == 1


LEVEL = "sb.auth.mfa.getAuthenticatorAssuranceLevel().then((r) => r.data.currentLevel)"


def test_a_page_enrolls_a_webauthn_factor_and_steps_up_to_aal2_with_it(chromium, world, anon_key):
    # auth-js asks for a cross-platform authenticator for a factor: a security key.
    page, cdp, authenticator = open_page(chromium, world["origin"], transport="usb")
    page.evaluate(CLIENT, [world["base"], anon_key])
    assert call(page, "sb.auth.signUp({ email: 'ann@example.com', password: 'secret-pw' })")["error"] is None
    assert page.evaluate(f"async () => await {LEVEL}") == "aal1"
    registered = page.evaluate("""async () => {
      const r = await sb.auth.mfa.webauthn.register({ friendlyName: 'Laptop' })
      return r.error ? r.error.message : r.data.user.factors.map((f) => [f.factor_type, f.status])
    }""")
    assert registered == [["webauthn", "verified"]]
    assert page.evaluate(f"async () => await {LEVEL}") == "aal2"
    stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]
    assert len(stored) == 1 and stored[0]["rpId"] == "localhost"

    # A new sign-in is aal1 until the factor answers a challenge.
    password = "sb.auth.signInWithPassword({ email: 'ann@example.com', password: 'secret-pw' })"
    page.evaluate("async () => { await sb.auth.signOut() }")
    assert call(page, password)["error"] is None
    assert page.evaluate(f"async () => await {LEVEL}") == "aal1"
    factor = page.evaluate("async () => (await sb.auth.mfa.listFactors()).data.all[0].id")
    stepped = page.evaluate(
        "async (id) => { const r = await sb.auth.mfa.webauthn.authenticate({ factorId: id });"
        " return r.error && (r.error.code || r.error.message) }",
        factor,
    )
    assert stepped is None and page.evaluate(f"async () => await {LEVEL}") == "aal2"
    token = page.evaluate("async () => (await sb.auth.getSession()).data.session.access_token")
    assert world["api"].get("/auth/v1/user", token=token).json["factors"][0]["status"] == "verified"

    # The ceremony by hand, its assertion sent twice: the second is refused.
    replay = page.evaluate("""async (factorId) => {
      const { data } = await sb.auth.mfa.webauthn.challenge({ factorId })
      const body = { factorId, challengeId: data.challengeId, webauthn: { ...data.webauthn,
        rpId: location.hostname, rpOrigins: [location.origin] } }
      const first = await sb.auth.mfa.webauthn.verify(body)
      const second = await sb.auth.mfa.webauthn.verify(body)
      return [first.error && first.error.code, second.error && second.error.code]
    }""", factor)  # fmt: skip
    assert replay == [None, "webauthn_challenge_not_found"]

    # A page of another origin (same RP id, a port the server does not list), holding the same key,
    # signed in as the same user: the assertion is refused, and the session stays aal1.
    other, _, _ = open_page(chromium, world["other"], credentials=stored, transport="usb")
    other.evaluate(CLIENT, [world["base"], anon_key])
    assert call(other, password)["error"] is None
    refused = other.evaluate(
        "async (id) => { const r = await sb.auth.mfa.webauthn.authenticate({ factorId: id });"
        " return r.error && (r.error.code || r.error.message) }",
        factor,
    )
    assert refused == "webauthn_verification_failed"
    assert other.evaluate(f"async () => await {LEVEL}") == "aal1"


ENROLL = """async ([key]) => {
  // In the dashboard's own origin (evaluated, as its CSP allows no script of ours): a user signs up
  // and enrolls a WebAuthn factor through the auth API, as mfa.webauthn.register() does.
  const call = async (path, body, token) => {
    const headers = { apikey: key, 'Content-Type': 'application/json' }
    if (token) headers.Authorization = `Bearer ${token}`
    const answer = await fetch(`/auth/v1${path}`, { method: 'POST', headers, body: JSON.stringify(body) })
    return answer.json()
  }
  const { access_token: token } = await call('/signup', { email: 'admin@example.com', password: 'secret-pw' })
  const factor = await call('/factors', { factor_type: 'webauthn', friendly_name: 'Key' }, token)
  const asked = await call(`/factors/${factor.id}/challenge`, {}, token)
  const options = asked.webauthn.credential_options.publicKey
  const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(options)
  const made = await navigator.credentials.create({ publicKey })
  const webauthn = { type: 'create', credential_response: made.toJSON() }
  const verified = await call(`/factors/${factor.id}/verify`, { challenge_id: asked.id, webauthn }, token)
  return verified.user.id
}"""


def test_the_dashboard_takes_a_security_key_as_an_administrator_s_second_factor(
    chromium, make_app, anon_key, service_key
):
    listener = listening_socket()  # the port is held until the server takes it
    port = listener.getsockname()[1]
    origin = f"http://localhost:{port}"  # the dashboard's origin is the RP's listed one
    app = make_app(
        MFA_WEB_AUTHN_ENROLL_ENABLED=True,
        MFA_WEB_AUTHN_VERIFY_ENABLED=True,
        SITE_URL=origin,
        RATE_LIMITS=True,
    )
    _, stop = serve_app(app, listener=listener)
    try:
        page, cdp, authenticator = open_page(chromium, f"{origin}/dashboard/", transport="usb")
        user_id = page.evaluate(ENROLL, [anon_key])
        body = {"app_metadata": {"role": "admin"}}
        admin = Api(app, service_key)
        assert admin.put(f"/auth/v1/admin/users/{user_id}", token=service_key, json=body).status_code == 200
        page.goto(f"{origin}/dashboard/")
        page.get_by_label("Email").fill("admin@example.com")
        page.get_by_label("Password").fill("secret-pw")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Use a security key or passkey").click()
        page.get_by_role("heading", name="Users").wait_for()
        assert page.get_by_text("admin@example.com").count() >= 1
        # Without the key, the same step is refused and says so, and no page opens.
        cdp.send("WebAuthn.clearCredentials", {"authenticatorId": authenticator})
        page.get_by_role("button", name="Sign out").click()
        page.get_by_label("Email").fill("admin@example.com")
        page.get_by_label("Password").fill("secret-pw")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Use a security key or passkey").click()
        page.get_by_role("alert").wait_for()
        page.goto(f"{origin}/dashboard/users")
        assert page.get_by_role("heading", name="Users").count() == 0
    finally:
        stop()
