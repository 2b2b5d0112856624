"""The one check every redirect goes through (auth/redirects.py): a `redirect_to` is parsed as a
browser parses it and each part matched against its own part of a REDIRECT_ALLOW_LIST pattern,
so no spelling of another host passes a wildcard. Each route that redirects is tested against it
where its flow lives (test_email.py, test_external.py)."""

import html
import json
import re
import shutil
import subprocess

import pytest

from app import create_app
from auth.redirects import redirect_target
from support import SECRET, require

SITE = "https://app.example.com"
ALLOWED = ",".join(
    [
        "https://*.example.com/**",
        "https://**.deep.example.org/cb",
        "myapp://*",
        "http://localhost:3000/**",
        "http://127.0.0.1:3000/**",
        "https://bücher.example.net/*",
        "https://fixed.example.net:8443/app/*",
    ]
)


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    settings = {
        "DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('redirects')}/t.db",
        "JWT_SECRET": SECRET,
        "SITE_URL": SITE,
        "REDIRECT_ALLOW_LIST": ALLOWED,
    }
    with create_app(settings).app_context():
        yield


CASES = [
    # Admitted, as the browser will read them (lowercase, punycode, no fragment).
    ("https://a.example.com/x", "https://a.example.com/x"),
    ("https://a-b.example.com/x/y?z=1", "https://a-b.example.com/x/y?z=1"),
    ("https://A.Example.COM/x", "https://a.example.com/x"),
    ("https://a.example.com/x#old-fragment", "https://a.example.com/x"),
    ("https://bücher.example.com/", "https://xn--bcher-kva.example.com/"),
    ("https://a.b.deep.example.org/cb", "https://a.b.deep.example.org/cb"),
    ("https://xn--bcher-kva.example.net/x", "https://xn--bcher-kva.example.net/x"),
    ("https://fixed.example.net:8443/app/page", "https://fixed.example.net:8443/app/page"),
    ("myapp://callback", "myapp://callback"),
    ("http://localhost:3000/auth/callback", "http://localhost:3000/auth/callback"),
    ("http://127.0.0.1:3000/cb", "http://127.0.0.1:3000/cb"),
    (f"{SITE}/any/page?x=1", f"{SITE}/any/page?x=1"),  # SITE_URL's own origin, as GoTrue
    # The issue's: another host spelled so that the raw string matched `*.example.com`.
    ("https://1249763210%3F.example.com/x", SITE),
    ("https://[2001:db8::1]?.example.com/x", SITE),
    ("https://evil\\.example.com/x", SITE),
    # User info: the host is after the `@`.
    ("https://a.example.com@evil.com/", SITE),
    ("https://a.example.com:pw@evil.com/", SITE),
    ("https://a.example.com%40evil.com/", SITE),
    ("https://@a.example.com/", SITE),
    # Backslashes, which a browser reads as slashes.
    ("https:\\\\evil.com/.example.com", SITE),
    ("https://a.example.com\\@evil.com/", SITE),
    ("https://evil.com\\.example.com/", SITE),
    # Encoded dots and delimiters in the host.
    ("https://evil%2ecom.example.com/", SITE),
    ("https://evil%2Ecom%2Fx.example.com/", SITE),
    ("https://evil.com%23.example.com/", SITE),
    ("https://evil.com%3F.example.com/", SITE),
    ("https://a%2eexample.com/", SITE),
    # Names no DNS label has, a trailing dot, an empty label.
    ("https://a.example.com./x", SITE),
    ("https://a..example.com/x", SITE),
    ("https://a_b.example.com/x", SITE),
    ("https://a*b.example.com/x", SITE),
    ("https://-a.example.com/x", SITE),
    # A wildcard is one label; `**` is needed for more.
    ("https://a.b.example.com/x", SITE),
    ("https://example.com/x", SITE),
    ("https://a.example.com.evil.com/x", SITE),
    ("https://deep.example.org/cb", SITE),
    # Ports: the pattern's (or the scheme's default), spelled as the browser spells it.
    ("https://a.example.com:8443/x", SITE),
    ("https://a.example.com:443/x", SITE),
    ("http://localhost:3001/x", SITE),
    ("https://fixed.example.net/app/page", SITE),
    # IP addresses: only as a pattern spells them, never through a wildcard.
    ("http://2130706433:3000/cb", SITE),
    ("http://0x7f.1:3000/cb", SITE),
    ("http://[::1]:3000/cb", SITE),
    ("https://1.2.3.4/x", SITE),
    # Schemes, scheme-relative and opaque URLs.
    ("//evil.com", SITE),
    ("//a.example.com/x", SITE),
    ("/relative/path", SITE),
    ("javascript:alert(1)//.example.com", SITE),
    ("JavaScript://a.example.com/%0aalert(1)", SITE),
    ("data:text/html,<script>alert(1)</script>", SITE),
    ("http://a.example.com/x", SITE),
    ("myapp:callback", SITE),
    ("myapp://callback/../../evil.example", SITE),
    ("otherapp://callback", SITE),
    # Whitespace and control characters a browser strips or stops at.
    ("https://a.exa\tmple.com/x", SITE),
    ("https://evil.com\n.example.com/", SITE),
    (" https://a.example.com/x", SITE),
    # IDN: the punycode is what is matched.
    ("https://bücher.example.net/x/y", SITE),
    ("https://xn--bcher-kva.example.org/cb", SITE),
    ("", SITE),
    ("not a url", SITE),
]


@pytest.mark.parametrize(("asked", "used"), CASES)
def test_a_redirect_leads_only_where_a_pattern_admits_every_part(context, asked, used):
    assert redirect_target(asked) == used


def test_a_pattern_path_wildcard_stays_in_one_segment(context):
    assert redirect_target("https://bücher.example.net/one") == "https://xn--bcher-kva.example.net/one"
    assert redirect_target("https://bücher.example.net/one/two") == SITE
    assert redirect_target("https://fixed.example.net:8443/app/") == "https://fixed.example.net:8443/app/"
    assert redirect_target("https://fixed.example.net:8443/other/x") == SITE


def browser_hrefs(urls, workdir):
    """Each URL as Chromium parses it (`new URL`), without its fragment; None where it refuses it."""
    chromium = require(shutil.which("chromium") or shutil.which("chromium-browser"), "chromium", "chromium")
    page = workdir / "urls.html"
    script = (
        "const out = URLS.map(u => { try { const p = new URL(u); p.hash = ''; return p.href; }"
        " catch (e) { return null; } });"
        "document.body.textContent = JSON.stringify(out);"
    )
    page.write_text(f"<html><body><script>const URLS = {json.dumps(urls)};{script}</script></body></html>")
    dumped = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={workdir / 'profile'}",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return json.loads(html.unescape(re.search(r"<body>(.*)</body>", dumped, re.S).group(1)))


def test_a_browser_reads_every_admitted_url_as_the_check_did(context, tmp_path):
    """Chromium's own URL parser (not ada's) is the judge: each URL the check admits leads the
    browser exactly where the check says it leads, and what is sent reads back as itself."""
    admitted = [(asked, used) for asked, used in CASES if used != SITE]
    hrefs = browser_hrefs([asked for asked, _ in admitted] + [used for _, used in admitted], tmp_path)
    asked_hrefs, sent_hrefs = hrefs[: len(admitted)], hrefs[len(admitted) :]
    for (asked, used), asked_href, sent_href in zip(admitted, asked_hrefs, sent_hrefs, strict=True):
        assert asked_href == used == sent_href, (asked, used, asked_href, sent_href)
