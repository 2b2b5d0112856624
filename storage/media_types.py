"""Media types (Content-Type values) read as media types, by the standard library's MIME header
parser: `image/svg+xml ;a=b` is image/svg+xml whatever the spaces, case or parameters around it.
An object's type is stored in one canonical spelling, and every decision on it (the bucket's
allowed_mime_types, inline or attachment) is made on the type and subtype alone."""

import functools
import re
from email.policy import default

from errors import invalid_request

DEFAULT = "application/octet-stream"
MAX_LENGTH = 255  # the mimetype column
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token


def parse(value):
    """The canonical spelling of the media type `value` (`type/subtype; name=value`, type, subtype
    and names in lower case), or None when it is not one media type in printable ASCII."""
    if not isinstance(value, str) or not value.isascii() or not value.replace("\t", " ").isprintable():
        return None
    header = default.header_factory("content-type", value)
    kind = (header.maintype, header.subtype)
    if header.defects or not all(TOKEN.fullmatch(part) and part != "*" for part in kind):
        return None
    spelled = f"{header.maintype}/{header.subtype}"
    for name, parameter in header.params.items():
        if not TOKEN.fullmatch(name) or not parameter.isascii() or not parameter.isprintable():
            return None
        if not TOKEN.fullmatch(parameter):
            parameter = '"' + parameter.replace("\\", "\\\\").replace('"', '\\"') + '"'
        spelled += f"; {name.lower()}={parameter}"
    return spelled if len(spelled) <= MAX_LENGTH else None


def of_request(value):
    """The media type a client labelled its upload with (the default when none): a 400 when the
    label is not one media type."""
    if value is None or value == "":
        return DEFAULT
    spelled = parse(value)
    if spelled is None:
        raise invalid_request("The Content-Type is not a media type")
    return spelled


@functools.lru_cache(maxsize=1024)
def stored(value):
    """A stored object's media type as it is served: the default for one that does not parse (an
    object stored before types were read as media types). Remembered: the standard library's
    parser cost a download more than its database read, and a service stores few types."""
    return parse(value) or DEFAULT


def essence(value):
    """The type/subtype of a stored or requested media type, without parameters."""
    return stored(value).partition(";")[0]
