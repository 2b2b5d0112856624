"""The table API's tests share these: the tables they expose, their seed rows, and the fixtures
that build an app over them on the backend under test (`make_rest`, `rest`)."""

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import pytest
import sqlalchemy as sa

from app import create_app
from auth import tokens
from extensions import db
from support import SECRET, Api

metadata = sa.MetaData()
items = sa.Table(
    "items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(50), nullable=False),
    sa.Column("price", sa.Double, nullable=True),
    sa.Column("qty", sa.Integer, nullable=True),
    sa.Column("active", sa.Boolean, nullable=True),
    sa.Column("created", sa.DateTime, nullable=True),
    sa.Column("code", sa.String(20), unique=True, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
    sa.CheckConstraint("qty >= 0", name="qty_not_negative"),
)
children = sa.Table(
    "children",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("item_id", sa.Integer, sa.ForeignKey("items.id"), nullable=False),
    sa.Column("label", sa.String(20), nullable=False, server_default="child"),
)
pairs = sa.Table(
    "pairs",
    metadata,
    sa.Column("a", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("b", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("value", sa.String(20)),
)
notes = sa.Table(
    "notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("body", sa.String(200), nullable=False),
)
events = sa.Table(
    "events",
    metadata,
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("amount", sa.Integer),
    sa.Column("source", sa.String(20), nullable=False, server_default="api"),
)
inbox = sa.Table(
    "inbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message", sa.String(200)),
)
RULE_TABLES = {
    rule: sa.Table(
        f"t_{rule}",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.Integer, nullable=True),
        sa.Column("label", sa.String(20)),
    )
    for rule in ("anon", "authenticated", "owner", "service_role")
}

ITEMS = [
    {"name": "Apple", "price": 1.5, "qty": 10, "active": True, "code": "A1", "note": "red",
     "created": datetime(2024, 1, 1, 10, 0)},
    {"name": "apple pie", "price": 3.25, "qty": 0, "active": False, "code": "A2", "note": None,
     "created": datetime(2024, 2, 1, 12, 30)},
    {"name": "Banana", "price": None, "qty": 5, "active": True, "code": None, "note": "yellow, ripe",
     "created": None},
    {"name": "cherry_tart", "price": 7.0, "qty": None, "active": None, "code": "C1", "note": "50% off",
     "created": datetime(2023, 12, 31, 23, 59, 59)},
    {"name": "Date", "price": 2.0, "qty": 3, "active": False, "code": "D1", "note": "it's \"sweet\"",
     "created": datetime(2024, 3, 1, 8, 0)},
]  # fmt: skip

TABLES_TOML = """
[tables.items]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"

[tables.children]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"

[tables.pairs]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"

[tables.notes]
select = "owner"
insert = "owner"
update = "owner"
delete = "owner"
owner_column = "user_id"

[tables.events]
select = "anon"
insert = "anon"
update = "anon"
delete = "anon"

[tables.inbox]
insert = "anon"

[tables.gone]
select = "anon"
""" + "".join(
    f"""
[tables.t_{rule}]
select = "{rule}"
insert = "{rule}"
update = "{rule}"
delete = "{rule}"
owner_column = "user_id"
"""
    for rule in RULE_TABLES
)


@dataclass
class Env:
    """An app over the tables above, clients with the anon and the service key, and the database."""

    app: object
    anon: Api
    service: Api
    engine: sa.Engine
    seeded: list = field(default_factory=lambda: list(ITEMS))  # the rows items starts with

    @staticmethod
    def table(name):
        return metadata.tables[name]

    def rows(self, name, order="id"):
        """What the database holds in table `name`, read past the API."""
        table = self.table(name)
        with self.engine.connect() as connection:
            query = sa.select(table).order_by(*(table.c[column] for column in order.split(",")))
            return [dict(row._mapping) for row in connection.execute(query)]

    def execute(self, statement):
        with self.engine.begin() as connection:
            connection.execute(statement)

    @staticmethod
    def ids(response):
        """The ids of the rows a successful read returned."""
        assert response.status_code in (200, 206), response.get_data(as_text=True)
        return [row["id"] for row in response.json]


@pytest.fixture
def make_rest(make_app, database_url, tmp_path, anon_key, service_key):
    """make_rest(**settings): an app exposing the tables above, created and seeded before it starts."""
    engine = sa.create_engine(database_url)
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(items.insert(), ITEMS)
    config = tmp_path / "tables.toml"
    config.write_text(TABLES_TOML)

    def make(**overrides):
        app = make_app(**{"TABLES_CONFIG": str(config), **overrides})
        return Env(app, Api(app, anon_key), Api(app, service_key), engine)

    yield make
    engine.dispose()


@pytest.fixture
def rest(make_rest):
    return make_rest()


@pytest.fixture
def tables_toml():
    """The tables.toml the `rest` fixtures expose, for a test that adds to it."""
    return TABLES_TOML


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def rest_reads(request, tmp_path_factory):
    """One app over the seeded tables above for all of a module's tests that ask for it, on each
    backend: for tests that only read, or whose every write is refused, and leave the tables as
    `rest` finds them. Making an app and its database for each of some 700 such cases was a fifth
    of the apps `make test` makes."""
    where = tmp_path_factory.mktemp("rest_reads")
    if request.param == "sqlite":
        url, server, name = f"sqlite:///{where}/reads.db", None, None
    else:
        server = request.getfixturevalue("mariadb_server")
        name = f"minibase_reads_{uuid.uuid4().hex[:12]}"
        with sa.create_engine(server).connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        url = server.set(database=name).render_as_string(hide_password=False)
    request.getfixturevalue(f"migrated_{request.param}").lay_into(url)
    engine = sa.create_engine(url)
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(items.insert(), ITEMS)
    config = where / "tables.toml"
    config.write_text(TABLES_TOML)
    settings = {"DATABASE_URL": url, "JWT_SECRET": SECRET, "BCRYPT_ROUNDS": 4, "RATE_LIMITS": False,
                "STORAGE_ROOT": str(where / "storage"), "TABLES_CONFIG": str(config)}  # fmt: skip
    app = create_app(settings)
    app.config["TESTING"] = True
    keys = (tokens.api_key("anon", SECRET), tokens.api_key("service_role", SECRET))
    yield Env(app, Api(app, keys[0]), Api(app, keys[1]), engine)
    with app.app_context():
        db.session.remove()
        db.engine.dispose()
    engine.dispose()
    if server is not None:
        with sa.create_engine(server).connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
