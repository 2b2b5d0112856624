"""Exits while it is imported."""

import sys

sys.exit(1)
