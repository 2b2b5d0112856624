"""Where a link or a sign-in may send the browser with its tokens: `redirect_to` when SITE_URL's
origin or a REDIRECT_ALLOW_LIST pattern admits it, else SITE_URL.

The URL is parsed as a browser parses it (WHATWG rules, by ada, the parser Node.js uses): a
backslash is a slash, `user@` is not the host, a percent-encoded or non-ASCII host is decoded and
punycoded, case folds. Each pattern is split into scheme, host, port and path, and each part of
the parsed URL is matched against its own: a `*` in a host stays within one label of
`[a-z0-9-]`, so no spelling of another host (`evil%3F.example.com`, `evil\\.example.com`,
`a.example.com@evil.com`) ever matches `*.example.com`. Anything a browser might read otherwise
than we do (user info, a backslash, a control character, an unusual host name, a trailing dot,
an IP address that no pattern spells out) is refused. What the browser is sent is the parsed URL
as the browser would serialize it, without its fragment (where the session goes)."""

import re
from dataclasses import dataclass
from functools import lru_cache

from ada_url import URL, HostType

from config import setting

# Schemes that run code or read local data where they land, whatever a pattern says.
NEVER = frozenset({"javascript", "data", "vbscript", "file", "blob", "about"})
LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
HOSTNAME = re.compile(rf"{LABEL}(?:\.{LABEL})*\Z")
PATTERN = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*):(?://(?P<authority>[^/?#]*))?(?P<rest>[^#]*)\Z", re.I)


DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}
AUTHORITY = re.compile(r"[a-z][a-z0-9+.-]*://([^/?#]*)", re.I)


@dataclass(frozen=True)
class Pattern:
    scheme: str
    host: str | None  # as written (lowercase, punycode); None: the URL has no host (`myapp:path`)
    host_glob: re.Pattern | None
    port: str  # "" the scheme's default, "*" any
    rest: re.Pattern


def _glob(text, one, any_):
    """`text` as a regex: `**` is `any_`, `*` is `one`, `?` one character of `one`."""
    parts = re.split(r"(\*\*|\*|\?)", text)
    translated = {"**": any_, "*": f"{one}*", "?": one}
    return re.compile("".join(translated.get(part, re.escape(part)) for part in parts) + r"\Z")


@lru_cache(maxsize=64)
def _pattern(text):
    """A REDIRECT_ALLOW_LIST entry split as a URL is; None when it is not one."""
    found = PATTERN.match(text.strip())
    if found is None:
        return None
    scheme, authority, rest = found["scheme"].lower(), found["authority"], found["rest"]
    host, host_glob, port = None, None, ""
    if authority is not None:
        host, port = authority, ""
        if re.search(r":[0-9*]*\Z", authority):
            host, _, port = authority.rpartition(":")
        host = ".".join(
            label if "*" in label or "?" in label else _ascii(label) for label in host.lower().split(".")
        )
        host_glob = _glob(host, "[a-z0-9-]", rf"[a-z0-9-]+(?:\.{LABEL})*")
        if port == DEFAULT_PORTS.get(scheme):
            port = ""
        if not rest and scheme in DEFAULT_PORTS:
            rest = "/"  # a browser gives every such URL a path
    return Pattern(scheme, host, host_glob, port, _glob(rest, "[^/]", ".*"))


def _ascii(label):
    """A host label as the browser looks it up: punycode for a non-ASCII one."""
    if label.isascii():
        return label
    try:
        return URL(f"https://{label}/").hostname
    except ValueError:
        return label


def _parse(text):
    """The URL as a browser reads it, or None when a browser could read it otherwise, or it may
    not lead anywhere that holds tokens."""
    if not text or "\\" in text or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text):
        return None
    try:
        url = URL(text)
    except ValueError:
        return None
    if url.protocol.rstrip(":") in NEVER or url.username or url.password:
        return None
    if url.host_type == HostType.DEFAULT and url.hostname and not HOSTNAME.match(url.hostname.lower()):
        return None  # also a trailing dot, an empty label, `_`, `*`
    authority = AUTHORITY.match(text)
    if authority is not None:
        written = authority[1].lower()
        if "@" in written or "%" in written:
            return None
        if written.isascii() and written.removesuffix(f":{url.port}") not in (
            url.hostname.lower(),
            url.host.lower(),
        ):
            return None  # another spelling of the host (`2130706433`, `[0::1]`, `:443`) than the browser's
    return url


def _admits(pattern, url):
    if pattern.scheme != url.protocol.rstrip(":"):
        return False
    hostname = url.hostname.lower()
    if pattern.host is None:
        if url.href[len(url.protocol) :].startswith("//"):
            return False
    elif url.host_type != HostType.DEFAULT:
        if hostname != pattern.host:
            return False  # an IP address matches only a pattern that spells it out
    elif not hostname or not pattern.host_glob.match(hostname):
        return False
    if pattern.port != "*" and pattern.port != url.port:
        return False
    return bool(pattern.rest.match(url.pathname + url.search))


def _same_origin(url, site):
    return (url.protocol, url.hostname.lower(), url.port) == (site.protocol, site.hostname.lower(), site.port)


def redirect_target(redirect_to):
    """`redirect_to` (as the browser will read it, without a fragment) when SITE_URL's origin or
    REDIRECT_ALLOW_LIST admits it, else SITE_URL: no link hands its tokens to a site nobody
    listed."""
    site = setting("SITE_URL")
    url = _parse(redirect_to) if redirect_to and redirect_to != site else None
    if url is None:
        return site
    site_url = _parse(site)
    patterns = [_pattern(p) for p in setting("REDIRECT_ALLOW_LIST").split(",") if p.strip()]
    if (site_url is not None and _same_origin(url, site_url)) or any(p and _admits(p, url) for p in patterns):
        url.hash = ""
        return url.href.removesuffix("#")
    return site
