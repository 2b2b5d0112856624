"""What a function's module sees: the request, the caller, a response, and clients that call this
minibase's own APIs. Standard library only: it is imported by every worker process, before the
function's own module, and must cost nothing (docs/functions.md shows it in use).

A function is a module in FUNCTIONS_DIR with a `handler(request, caller)`; what it returns is the
response: a Response, a dict or list (JSON), a str (text), bytes, None (204), an iterator or
generator (streamed, chunk by chunk), or a tuple (body, status), (body, headers) or
(body, status, headers) as Flask takes them."""

import json
import os
import urllib.parse

CLIENT_TIMEOUT = 30  # seconds a call to minibase's own API may take before it raises


class Headers:
    """A request's headers: case-insensitive `get` and `in`, every value of a name with `get_all`."""

    def __init__(self, pairs):
        self.pairs = [(name, value) for name, value in pairs]
        self._first = {}
        for name, value in self.pairs:
            self._first.setdefault(name.lower(), value)

    def get(self, name, default=None):
        return self._first.get(name.lower(), default)

    def get_all(self, name):
        return [value for key, value in self.pairs if key.lower() == name.lower()]

    def __getitem__(self, name):
        return self._first[name.lower()]

    def __contains__(self, name):
        return name.lower() in self._first

    def items(self):
        return list(self.pairs)

    def __iter__(self):
        return iter(self.pairs)

    def __repr__(self):
        return f"Headers({self.pairs!r})"


class File:
    """A file part of a multipart form."""

    def __init__(self, filename, content_type, data):
        self.filename, self.content_type, self.data = filename, content_type, data

    def __repr__(self):
        return f"File({self.filename!r}, {self.content_type!r}, {len(self.data)} bytes)"


class Request:
    """The HTTP request as the client sent it. `path` is what follows /functions/v1 (`/NAME/sub`);
    `query` the first value of each query parameter, `query_list` every (name, value)."""

    def __init__(self, method, url, path, query_list, headers, body):
        self.method, self.url, self.path, self.body = method, url, path, body
        self.query_list = [tuple(pair) for pair in query_list]
        self.query = {}
        for name, value in self.query_list:
            self.query.setdefault(name, value)
        self.headers = Headers(headers)

    @property
    def content_type(self):
        return (self.headers.get("content-type") or "").split(";")[0].strip().lower()

    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body) if self.body else None

    def form(self):
        """A urlencoded or multipart form: a list of (name, value), each value a str or a File."""
        if self.content_type == "application/x-www-form-urlencoded":
            return urllib.parse.parse_qsl(self.text(), keep_blank_values=True)
        if self.content_type != "multipart/form-data":
            raise ValueError(f"not a form: {self.content_type or 'no content type'}")
        from email.parser import BytesParser  # imported when used: every worker's start pays for imports
        from email.policy import HTTP

        head = f"Content-Type: {self.headers.get('content-type')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + self.body)
        fields = []
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            data = part.get_payload(decode=True) or b""
            if filename is None:
                fields.append((name, data.decode(part.get_content_charset() or "utf-8", "replace")))
            else:
                fields.append((name, File(filename, part.get_content_type(), data)))
        return fields


class Caller:
    """Who called: `role` (anon, authenticated or service_role), `user_id` for a signed-in user,
    the verified token's `claims`, and the `token` and `apikey` it came with (to call on as them)."""

    def __init__(self, role, user_id=None, claims=None, token=None, apikey=None):
        self.role, self.user_id, self.claims = role, user_id, claims or {}
        self.token, self.apikey = token, apikey

    def client(self):
        """minibase's APIs as this caller: its rules and row policies hold."""
        apikey = self.apikey or os.environ.get("SUPABASE_ANON_KEY")
        return Client(apikey, self.token or apikey)

    def __repr__(self):
        return f"Caller(role={self.role!r}, user_id={self.user_id!r})"


def service():
    """minibase's APIs as the service (service_role: every row, every rule passed)."""
    key = os.environ["SUPABASE_SERVICE_ROLE_KEY"]
    return Client(key, key)


class Response:
    """A response as the function makes it: `body` a str, bytes, a dict or list (sent as JSON), or an
    iterator of str or bytes (streamed)."""

    def __init__(self, body=b"", status=200, headers=None):
        self.body, self.status, self.headers = body, status, dict(headers or {})


class Answer:
    """What Client gives back: `status`, `headers`, the raw `body`, and `json()` of it."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def ok(self):
        return 200 <= self.status < 300

    def json(self):
        return json.loads(self.body) if self.body else None

    def __repr__(self):
        return f"Answer({self.status})"


class Client:
    """A small HTTP client for this minibase's APIs (SUPABASE_URL): `get`, `post`, `patch`, `put`,
    `delete` take a path such as "/rest/v1/todos?select=*" and return an Answer; never raises for
    a status. supabase-py, where it is installed, works as well: create_client(SUPABASE_URL, …)."""

    def __init__(self, apikey, token):
        self.base = os.environ["SUPABASE_URL"].rstrip("/")
        self.headers = {"apikey": apikey, "Authorization": f"Bearer {token}"}

    def request(self, method, path, json_body=None, data=None, headers=None):
        import urllib.error  # imported when used: every worker's start pays for imports
        import urllib.request

        body = data
        sent = dict(self.headers)
        if json_body is not None:
            body = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        asked = urllib.request.Request(self.base + path, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(asked, timeout=CLIENT_TIMEOUT) as answer:  # noqa: S310
                return Answer(answer.status, dict(answer.headers), answer.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, dict(error.headers), error.read())

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def post(self, path, json=None, data=None, headers=None):
        return self.request("POST", path, json, data, headers)

    def patch(self, path, json=None, data=None, headers=None):
        return self.request("PATCH", path, json, data, headers)

    def put(self, path, json=None, data=None, headers=None):
        return self.request("PUT", path, json, data, headers)

    def delete(self, path, headers=None):
        return self.request("DELETE", path, headers=headers)
