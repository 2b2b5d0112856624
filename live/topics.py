"""Private channels: who may join (and receive) and who may send on a topic, as Supabase's policies on
realtime.messages say it. tables.toml's [realtime] takes the tables' rule words for `select` (join and
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
every rule as it bypasses row-level security. The section is parsed in tables_toml/realtime.py."""

import sqlalchemy as sa

from extensions import db, state
from row_policies import check_compiles, values_for


def _messages(topic, extension):
    """The message a policy looks at, as a one-row table named like Supabase's."""
    return sa.select(
        sa.bindparam("rt_topic", topic, type_=sa.String).label("topic"),
        sa.bindparam("rt_extension", extension, type_=sa.String).label("extension"),
    ).subquery("messages")


def has_policies():
    rules = state().tables_toml.realtime
    return rules is not None and bool(rules.policies)


def check():
    """Have the database compile every [realtime.policies] entry: a ConfigError at start otherwise."""
    rules = state().tables_toml.realtime
    if rules is None:
        return
    for operation, policy in rules.policies.items():
        messages = _messages("", "broadcast")
        statement = sa.select(sa.literal(1)).select_from(messages).where(policy.clause(messages, {}))
        check_compiles(statement, "tables.toml: [realtime.policies]", operation)


def rights(topic, who):
    """(may join and receive, may broadcast, may track presence) of `who` on the private topic."""
    return (
        allowed(topic, who, "select"),
        allowed(topic, who, "insert"),
        allowed(topic, who, "insert", "presence"),
    )


def allowed(topic, who, operation, extension="broadcast"):
    """Whether `who` may `operation` (select: join and receive; insert: send) on the private topic
    `topic` (its name without `realtime:`), for `extension`."""
    if who.role == "service_role":
        return True
    rules = state().tables_toml.realtime
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
