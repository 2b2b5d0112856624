"""/rest/v1/{table}: PostgREST's wire format over the tables tables.toml exposes (SPEC §4)."""

from flask import Blueprint

bp = Blueprint("rest", __name__, url_prefix="/rest/v1")
