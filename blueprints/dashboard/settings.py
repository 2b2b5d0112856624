"""The dashboard's Settings page: whether the database, SMTP, Redis and storage answer, the migration
version, and the effective settings with every secret masked."""

from blueprints.dashboard.base import bp, page
from dashboard import health


@bp.get("/settings")
def settings_page():
    return page("settings.html", checks=health.checks(), version=health.migration_version(),
                settings=health.effective_settings())  # fmt: skip
