"""deploy/nginx.conf, run by a real nginx in front of `python wsgi.py`: the socket is upgraded
through it (same host and port as the API), and the API still answers through it."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
from phoenix import Client

from support import eventually, free_port, require

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
ROOT = Path(__file__).resolve().parent.parent.parent
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


class Proxied:
    """The server as a client sees it through nginx."""

    def __init__(self, server, port):
        self.anon, self.service = server.anon, server.service
        self.port, self.base = port, f"http://127.0.0.1:{port}"

    def socket_url(self, key=None, vsn="1.0.0"):
        return f"ws://127.0.0.1:{self.port}/realtime/v1/websocket?apikey={key or self.anon}&vsn={vsn}"


@pytest.fixture
def nginx(server, tmp_path):
    require(NGINX, "nginx", "nginx")
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    port = free_port()
    site = re.sub(r"listen 443 ssl http2;", f"listen 127.0.0.1:{port};", site)
    site = re.sub(r"\s*ssl_certificate(_key)?\s+\S+;", "", site)
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{server.port};")
    temp = tmp_path / "nginx"
    temp.mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"daemon off;\nworker_processes 1;\npid {temp}/nginx.pid;\nerror_log {temp}/error.log;\n"
        "events { worker_connections 256; }\n"
        f"http {{\naccess_log off;\nclient_body_temp_path {temp}/body;\nproxy_temp_path {temp}/proxy;\n"
        f"fastcgi_temp_path {temp}/fastcgi;\nuwsgi_temp_path {temp}/uwsgi;\nscgi_temp_path {temp}/scgi;\n"
        f"{site}\n}}\n"
    )
    process = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(temp)], stderr=subprocess.PIPE)

    def answered():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        return (requests.get(f"http://127.0.0.1:{port}/health", timeout=1),)  # a 503 is falsy

    eventually(answered, 10, 0.05, "nginx started", ignoring=requests.RequestException)
    yield Proxied(server, port)
    process.terminate()
    process.wait(timeout=10)
    process.stderr.close()


def test_the_socket_and_the_api_through_deploy_nginx_conf(nginx):
    ann, bob = Client(nginx), Client(nginx, "2.0.0")
    assert ann.join("room")["status"] == "ok" and bob.join("room")["status"] == "ok"
    ann.send(
        "realtime:room", "broadcast", {"type": "broadcast", "event": "via", "payload": {"p": "nginx"}}, "1"
    )
    assert bob.until("broadcast")["payload"]["payload"] == {"p": "nginx"}
    assert requests.get(f"{nginx.base}/health", timeout=5).json() == {"status": "ok"}
    answer = requests.get(f"{nginx.base}/rest/v1/nothing", headers={"apikey": nginx.anon}, timeout=5)
    assert answer.status_code == 404 and answer.json()["message"].startswith("Could not find")
