"""A hook endpoint for the tests of auth hooks (tests/test_hooks.py, tests/test_external.py): a real
HTTP server in the test's process that verifies each call's Standard Webhooks signature with the
standardwebhooks library and records it."""

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

HOOK_SECRET = "v1,whsec_" + base64.b64encode(b"k" * 32).decode()


class HookServer:
    """A hook endpoint: each call is verified with `secret` and recorded; `answer(payload)` gives
    (status, content type, body) or sleeps. The verification result is recorded, not trusted: a call
    whose signature fails is answered 401, as a hook written with the library answers."""

    def __init__(self, secret=HOOK_SECRET):
        self.calls, self.secret = [], secret
        self.answer = lambda payload: (204, None, b"")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {name: value for name, value in self.headers.items()}
                try:
                    payload = Webhook(server.secret.removeprefix("v1,")).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    payload, verified = json.loads(body), False
                server.calls.append({"payload": payload, "verified": verified, "headers": headers})
                status, kind, text = server.answer(payload) if verified else (401, None, b"")
                self.send_response(status)
                if kind:
                    self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def json(self, body, status=200):
        self.answer = lambda payload: (status, "application/json", json.dumps(body).encode())

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
