"""Fixtures of the storage tests: an app whose tables.toml declares buckets, its STORAGE_ROOT (a
temporary directory), clients for anon, the service key and signed-in users."""

import pytest

from support import Api

BUCKETS = """
[buckets.avatars]
public = true
file_size_limit = "1KB"
allowed_mime_types = ["image/*", "text/plain"]
select = "anon"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.private]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"

[buckets.locked]
"""


@pytest.fixture
def storage_root(tmp_path):
    return tmp_path / "storage"


@pytest.fixture
def tables_config(tmp_path):
    path = tmp_path / "tables.toml"
    path.write_text(BUCKETS)
    return path


@pytest.fixture
def app(make_app, tables_config, storage_root):
    return make_app(TABLES_CONFIG=str(tables_config), STORAGE_ROOT=str(storage_root))


class Client(Api):
    """Api whose responses are read whole and closed, as a WSGI server closes them (a download's
    file is closed then)."""

    def request(self, *args, **kwargs):
        return super().request(*args, buffered=True, **kwargs)


@pytest.fixture
def api(app, anon_key):
    return Client(app, anon_key)


@pytest.fixture
def service(app, service_key):
    return Client(app, service_key)


@pytest.fixture
def browser(app):
    """A client with no API key: a link in a page."""
    return Client(app, None)


@pytest.fixture
def user_token(api):
    """A function: the access token of a newly signed-up user."""

    def make(email):
        return api.sign_up(email=email)["access_token"]

    return make
