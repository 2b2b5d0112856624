"""A page in Chromium that subscribes, as a browser app does: supabase-js's own browser bundle,
the browser's own WebSocket, served from another origin than the API. Driven over the DevTools
protocol; skipped where Chromium is not installed (CI installs it)."""

import functools
import itertools
import json
import shutil
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from phoenix import Client
from websockets.sync.client import connect

from support import eventually, free_port, require

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PAGE = """<!doctype html><html><head><title>waiting</title><script src="supabase.js"></script></head>
<body><script>
const params = new URLSearchParams(location.search)
const client = supabase.createClient(params.get('url'), params.get('key'))
const heard = []
const channel = client.channel('page', { config: { broadcast: { self: true } } })
channel.on('broadcast', { event: 'ping' }, ({ payload }) => {
  heard.push(payload.from)
  document.title = heard.join(',')
})
channel.subscribe((status) => {
  document.body.dataset.status = status
  if (status === 'SUBSCRIBED') channel.send({ type: 'broadcast', event: 'ping', payload: { from: 'page' } })
})
</script></body></html>
"""


@pytest.fixture
def page_origin(node_modules, tmp_path):
    """The page and supabase-js's browser bundle, served from an origin of their own."""
    shutil.copy(node_modules / "@supabase" / "supabase-js" / "dist" / "umd" / "supabase.js", tmp_path)
    (tmp_path / "page.html").write_text(PAGE)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


REQUESTS = itertools.count(1)


def evaluate(ws, expression):
    ident = next(REQUESTS)
    ws.send(json.dumps({"id": ident, "method": "Runtime.evaluate", "params": {"expression": expression}}))
    while True:
        message = json.loads(ws.recv(timeout=10))
        if message.get("id") == ident:
            return message["result"]["result"].get("value")


def test_a_page_in_chromium_subscribes_and_hears_broadcasts(server, page_origin, tmp_path):
    require(CHROMIUM, "chromium", "chromium")
    port = free_port()
    url = f"{page_origin}/page.html?url={server.base}&key={server.anon}"
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
         f"--user-data-dir={tmp_path / 'profile'}", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        targets = f"http://127.0.0.1:{port}/json/list"

        def pages():
            return [target for target in requests.get(targets, timeout=2).json() if target["type"] == "page"]

        page = eventually(pages, 60, 0.2, "chromium started", ignoring=requests.RequestException)[0]
        with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            status = "document.body && document.body.dataset.status"
            eventually(lambda: evaluate(ws, status) == "SUBSCRIBED", 60, 0.2, "the page subscribed")
            other = Client(server, "2.0.0")
            other.join("page")
            other.send(
                "realtime:page",
                "broadcast",
                {"type": "broadcast", "event": "ping", "payload": {"from": "py"}},
            )
            heard = lambda: sorted(str(evaluate(ws, "document.title")).split(",")) == ["page", "py"]  # noqa: E731
            eventually(heard, 60, 0.2, "the page heard both broadcasts")
    finally:
        browser.terminate()
        browser.wait(timeout=20)
