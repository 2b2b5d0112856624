"""tables.toml: parsing, the refusals that stop the service from starting, and the
decision for each role and rule."""

import re
import shutil
import tomllib

import pytest
import sqlalchemy as sa

import config
import tables_toml
from blueprints.gateway import Identity
from errors import APIError
from rest import policies
from row_policies import OPERATIONS
from tables_toml.tables import Policy
from variables import ConfigError

ANON = Identity("anon")
USER = Identity("authenticated", user_id=7, session_id="s")
SERVICE = Identity("service_role")


def parse(text, users_table="users"):
    """The table policies of a tables.toml text."""
    return tables_toml.parse(tomllib.loads(text), users_table).tables


def test_rules_and_defaults():
    parsed = parse('[tables.places]\nselect = "anon"\nupdate = "owner"\nowner_column = "user_id"\n')
    policy = parsed["places"]
    assert policy.rules == {
        "select": "anon",
        "insert": "service_role",
        "update": "owner",
        "delete": "service_role",
    }
    assert policy.owner_column == "user_id"


def test_no_tables_section_exposes_nothing():
    assert parse("") == {}
    assert parse("[tables]\n") == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[tables.users]\nselect = "anon"\n', "users table"),
        ('[tables.Users]\nselect = "anon"\n', "users table"),
        ('[tables." users"]\nselect = "anon"\n', "users table"),
        ('[tables.minibase_sessions]\nselect = "service_role"\n', "service's own tables"),
        ("[tables.minibase_refresh_tokens]\n", "service's own tables"),
        ("[tables.MINIBASE_PROFILES]\n", "service's own tables"),
        ("[tables.minibase_alembic_version]\n", "service's own tables"),
        ("[tables.minibase_future]\n", "service's own tables"),
        ('[tables.places]\nselect = "everyone"\n', "'everyone' is not one of"),
        ("[tables.places]\nselect = 1\n", "is not one of"),
        ('[tables.places]\nselect = ["anon"]\n', "is not one of"),
        ('[tables.places]\nupdate = "owner"\n', "owner_column"),
        ('[tables.places]\ndelete = "owner"\nowner_column = ""\n', "owner_column"),
        ('[tables.places]\nselect = "owner"\nowner_column = 3\n', "owner_column"),
        ('[tables.places]\nselct = "anon"\n', "unknown key 'selct'"),
        ('[table.places]\nselect = "anon"\n', "unknown top-level key 'table'"),
        ('tables = "places"\n', "'tables' must be"),
        ("[tables]\nplaces = 1\n", "must be a table of rules"),
        ('[tables.""]\n', "non-empty"),
        ('[tables.posts]\nreferences = "users.user_id"\n', "references must be a table"),
        (
            '[tables.posts]\nreferences = { author_id = "users" }\n',
            'must name a table and its column: "users.user_id"',
        ),
        ("[tables.posts]\nreferences = { author_id = 3 }\n", "must name a table and its column"),
        ('[tables.posts]\nreferences = { author_id = ".user_id" }\n', "must name a table and its column"),
    ],
)
def test_invalid_configurations_refuse_to_start_saying_why(text, says):
    with pytest.raises(ConfigError) as raised:
        parse(text)
    assert says in str(raised.value)


def test_a_custom_users_table_is_refused_too():
    with pytest.raises(ConfigError, match="users table"):
        parse('[tables.members]\nselect = "anon"\n', users_table="members")
    assert "users" in parse('[tables.users]\nselect = "anon"\n', users_table="members")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[tables.places\n", "not valid TOML"),
        ('[tables.places]\nselect = "anon"\nselect = "owner"\n', "not valid TOML"),
        ("\x00", "not valid TOML"),
    ],
)
def test_bad_toml_refuses_to_start(tmp_path, text, says):
    path = tmp_path / "tables.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says):
        tables_toml.load(path, "users")


def test_binary_file_refuses_to_start(tmp_path):
    path = tmp_path / "tables.toml"
    path.write_bytes(b"\xff\xfe[tables]")
    with pytest.raises(ConfigError, match="TABLES_CONFIG"):
        tables_toml.load(path, "users")


def test_missing_file_refuses_to_start(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        tables_toml.load(tmp_path / "nope.toml", "users")


def test_the_app_refuses_to_start(make_app, tmp_path):
    path = tmp_path / "tables.toml"
    path.write_text('[tables.users]\nselect = "anon"\n')
    with pytest.raises(ConfigError, match="users table"):
        make_app(TABLES_CONFIG=str(path))
    path.write_text('[tables.notes]\nselect = "owner"\n')
    with pytest.raises(ConfigError, match="owner_column"):
        make_app(TABLES_CONFIG=str(path))


def test_the_app_keeps_the_policies(make_app, tmp_path):
    path = tmp_path / "tables.toml"
    path.write_text('[tables.places]\nselect = "anon"\n')
    app = make_app(TABLES_CONFIG=str(path))
    assert list(app.extensions["minibase"].tables_toml.tables) == ["places"]
    assert make_app().extensions["minibase"].tables_toml.tables == {}


def test_the_example_file_is_valid(tmp_path):
    example = config.ROOT / "tables.example.toml"
    copy = tmp_path / "tables.toml"
    shutil.copy(example, copy)
    assert tables_toml.load(copy, "users")


# (rule, identity) -> allowed (owner id or None) or the refusal status
DECISIONS = [
    ("anon", ANON, None),
    ("anon", USER, None),
    ("anon", SERVICE, None),
    ("authenticated", ANON, 401),
    ("authenticated", USER, None),
    ("authenticated", SERVICE, None),
    ("owner", ANON, 401),
    ("owner", USER, 7),
    ("owner", SERVICE, None),
    ("service_role", ANON, 401),
    ("service_role", USER, 403),
    ("service_role", SERVICE, None),
]


@pytest.mark.parametrize(("rule", "who", "expected"), DECISIONS)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_authorize(rule, who, expected, operation):
    policy = Policy("places", dict.fromkeys(OPERATIONS, rule), "user_id")
    if expected in (401, 403):
        with pytest.raises(APIError) as raised:
            policies.authorize(policy, operation, who)
        assert raised.value.status == expected and raised.value.error_code == "42501"
        return
    grant = policies.authorize(policy, operation, who)
    assert grant.owner_id == expected


def test_owner_condition_is_a_bound_comparison():
    table = sa.Table("places", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("user_id", sa.Integer))
    policy = Policy("places", dict.fromkeys(OPERATIONS, "owner"), "user_id")
    grant = policies.authorize(policy, "select", USER)
    condition = grant.condition(table)
    compiled = condition.compile()
    assert str(compiled) == "places.user_id = :user_id_1" and compiled.params == {"user_id_1": 7}
    assert grant.owns(7) and grant.owns("7") and not grant.owns(8)
    assert policies.authorize(policy, "select", SERVICE).condition(table) is None


def test_check_owner_refuses_another_users_id():
    policy = Policy("places", dict.fromkeys(OPERATIONS, "owner"), "user_id")
    grant = policies.authorize(policy, "insert", USER)
    grant.check_owner({"user_id": "7", "name": "x"})
    grant.check_owner({"name": "x"})
    with pytest.raises(APIError) as raised:
        grant.check_owner({"user_id": 8})
    assert raised.value.status == 403 and raised.value.error_code == "42501"
    policies.authorize(policy, "insert", SERVICE).check_owner({"user_id": 8})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[functions.f]\nexecute = "anon"\n', "sql must be one SQL statement"),
        ('[functions.f]\nsql = "SELECT 1"\nexecute = "everyone"\n', "is not one of"),
        ('[functions.f]\nsql = "SELECT 1"\nreturns = "table"\n', "returns = 'table'"),
        ('[functions.f]\nsql = "SELECT 1"\nwrites = "yes"\n', "writes must be true or false"),
        ('[functions.f]\nsql = "SELECT 1"\nrole = "anon"\n', "unknown key 'role'"),
        ('[functions."a/b"]\nsql = "SELECT 1"\n', "without '/'"),
        ('functions = "f"\n', "'functions' must be"),
    ],
)
def test_functions_that_cannot_work_refuse_to_start(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tables_toml.parse(tomllib.loads(text), "users")


def test_a_functions_parameters_are_its_colon_names():
    functions = tables_toml.parse(
        tomllib.loads("[functions.f]\nsql = \"SELECT * FROM t WHERE a = :a AND b = :uid AND c = 'x:y'\"\n"),
        "users",
    ).functions
    assert set(functions["f"].params) == {"a", "uid"} and functions["f"].rule == "service_role"
