"""tables.toml: which tables /rest/v1 exposes, and who may do what (SPEC §4.1)."""


def init_app(app):
    """Load and check TABLES_CONFIG at start; refuse to start when it cannot work."""
