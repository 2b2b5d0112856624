"""/dashboard: the blueprint (base.py: who may enter, the headers of every page) and its pages, one
module per section."""

from blueprints.dashboard import (  # noqa: F401 (their routes join it)
    backups,
    functions,
    pages,
    settings,
    storage,
    tables,
    webhooks,
)
from blueprints.dashboard.base import bp  # noqa: F401
