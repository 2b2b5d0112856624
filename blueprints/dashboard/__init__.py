"""/dashboard: the blueprint (base.py: who may enter, the headers of every page) and its pages, one
module per section."""

from blueprints.dashboard import backups, pages, settings, storage, tables  # noqa: F401 (their routes join it)
from blueprints.dashboard.base import bp  # noqa: F401
