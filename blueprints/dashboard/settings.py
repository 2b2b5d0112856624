"""The dashboard's Settings page: whether the database, SMTP, Redis and storage answer, the migration
version, the service's figures from its metrics, and the effective settings with every secret
masked."""

import metrics
from blueprints.dashboard.base import bp, page
from blueprints.health import measure_backlog
from dashboard import figures, health


@bp.get("/settings")
def settings_page():
    if metrics.enabled():
        measure_backlog()
    return page("settings.html", checks=health.checks(), version=health.migration_version(),
                figures=figures.figures(), settings=health.effective_settings())  # fmt: skip
