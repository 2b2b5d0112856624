"""Passenger (cPanel's "Setup Python App", Plesk, Dreamhost) imports `application` from a file of
this name in the application root: copy it there, beside wsgi.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wsgi import application  # noqa: E402, F401
