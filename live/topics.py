"""Private channels: who may join (and receive) and who may send on a topic, as Supabase's policies on
realtime.messages say it. tables.toml's [realtime] takes §4.1's rule words for `select` (join and
receive) and `insert` (send: broadcast, presence), and [realtime.policies] SQL over `topic` and
`extension` (`broadcast`, `presence`) with the row policies' parameters (:uid, :role, :email, :aal,
:app_metadata.KEY), run by the database:

    [realtime]
    select = "authenticated"
    insert = "authenticated"

    [realtime.policies]
    select = "topic LIKE 'room-%'"
    insert = "topic LIKE 'room-%' AND extension = 'broadcast'"

Without a [realtime] section no private channel is allowed but to the service key, which passes
every rule as it bypasses row-level security."""

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from config import ConfigError
from extensions import db, state
from row_policies import check_compiles, rule_words, values_for
from row_policies import parse as parse_policies

OPERATIONS = ("select", "insert")


@dataclass(frozen=True)
class Rules:
    rules: dict  # select | insert -> rule word
    policies: dict = field(default_factory=dict)  # select | insert -> RowPolicy


def init_app(app):
    app.extensions["minibase"].realtime_rules = load(app.config.get("TABLES_CONFIG"))


def load(path):
    """The [realtime] section of a tables.toml file, or None."""
    if path is None:
        return None
    try:
        with Path(path).open("rb") as file:
            document = tomllib.load(file)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # rest.policies reads the same file first and says what is wrong with it
    return parse(document.get("realtime"), source=str(path))


def parse(entry, source="tables.toml"):
    if entry is None:
        return None
    where = f"{source}: [realtime]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table of rules")
    unknown = sorted(set(entry) - {*OPERATIONS, "policies"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected select, insert or policies")
    rules = rule_words(where, entry, OPERATIONS)
    policies = parse_policies(where, "messages", entry.get("policies", {}))
    wrong = sorted(set(policies) - set(OPERATIONS))
    if wrong:
        raise ConfigError(f"{where}.policies: {wrong[0]} has no meaning here; a policy is select or insert")
    return Rules(rules, policies)


def _messages(topic, extension):
    """The message a policy looks at, as a one-row table named like Supabase's."""
    return sa.select(
        sa.bindparam("rt_topic", topic, type_=sa.String).label("topic"),
        sa.bindparam("rt_extension", extension, type_=sa.String).label("extension"),
    ).subquery("messages")


def has_policies():
    rules = state().realtime_rules
    return rules is not None and bool(rules.policies)


def check():
    """Have the database compile every [realtime.policies] entry: a ConfigError at start otherwise."""
    rules = state().realtime_rules
    if rules is None:
        return
    for operation, policy in rules.policies.items():
        messages = _messages("", "broadcast")
        statement = sa.select(sa.literal(1)).select_from(messages).where(policy.clause(messages, {}))
        check_compiles(statement, "tables.toml: [realtime.policies]", operation)


def allowed(topic, who, operation, extension="broadcast"):
    """Whether `who` may `operation` (select: join and receive; insert: send) on the private topic
    `topic` (its name without `realtime:`), for `extension`."""
    if who.role == "service_role":
        return True
    rules = state().realtime_rules
    if rules is None:
        return False
    rule = rules.rules[operation]
    if not (rule == "anon" or (who.role == "authenticated" and rule in ("authenticated", "owner"))):
        return False
    policy = rules.policies.get(operation)
    if policy is None:
        return True
    messages = _messages(topic, extension)
    statement = sa.select(sa.literal(1)).select_from(messages).where(policy.clause(messages, values_for(who)))
    with db.engine.connect() as connection:
        return connection.execute(statement).first() is not None
