"""A real HTTP receiver for webhooks and schedules on 127.0.0.1: each POST is verified with the
standardwebhooks library and recorded; `answer(call)` decides the status (and may sleep)."""

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

SECRET = "whsec_" + base64.b64encode(b"w" * 32).decode()


class Receiver:
    def __init__(self, secret=SECRET, port=0):
        self.calls, self.secret, self.lock = [], secret, threading.Lock()
        self.answer = lambda call: 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = dict(self.headers.items())
                try:
                    payload, verified = Webhook(receiver.secret).verify(body, headers), True
                except WebhookVerificationError:
                    payload, verified = json.loads(body), False
                call = {"payload": payload, "verified": verified, "headers": headers, "at": time.time()}
                status = receiver.answer(call)
                call["status"] = status
                with receiver.lock:
                    receiver.calls.append(call)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_port
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def accepted(self):
        """The payloads answered 2xx, in the order they came."""
        with self.lock:
            return [call["payload"] for call in self.calls if 200 <= call["status"] < 300]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
