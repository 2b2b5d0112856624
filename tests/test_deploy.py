"""The deployment files agree with the service: the unit gives the drain its time, the proxy waits
longer than the database timeouts, and both name files that exist."""

import re
from pathlib import Path

import config
import server

ROOT = Path(__file__).resolve().parent.parent


def test_the_systemd_unit_lets_the_drain_finish():
    unit = (ROOT / "deploy" / "minibase.service").read_text()
    assert "KillSignal=SIGTERM" in unit
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))
    assert stop > server.DRAIN_SECONDS
    nofile = int(re.search(r"^LimitNOFILE=(\d+)$", unit, re.M).group(1))
    assert nofile > server.CONNECTION_LIMIT
    assert re.search(r"^ExecStart=\S+/python wsgi.py$", unit, re.M) and (ROOT / "wsgi.py").exists()


def test_the_proxy_waits_longer_than_the_service_does():
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", site).group(1))
    defaults = config.from_environment({})
    assert read_timeout > 2 * defaults["DB_TIMEOUT"] + defaults["STATEMENT_TIMEOUT"]
    assert "X-Forwarded-For" in site and "client_max_body_size 1m" in site
