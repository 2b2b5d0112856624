#!/usr/bin/env python3
"""minibase as a CGI script, for a host that offers nothing else. Every request starts a new
Python process that imports the whole service (2-3 s on a small host): use Passenger or a
long-running server where you can. Failed sign-ins are counted in the database, so their limit
holds; the other rate limits are per process here unless RATE_LIMIT_STORAGE_URI points at Redis.

Copy to your cgi-bin, point the first line at the project's .venv/bin/python, set MINIBASE_ROOT
below (or in the host's environment) to the project's directory, and `chmod 755` it."""

import os
import sys

ROOT = os.environ.get("MINIBASE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.chdir(ROOT)

from wsgiref.handlers import CGIHandler  # noqa: E402

from wsgi import application  # noqa: E402

CGIHandler().run(application)
