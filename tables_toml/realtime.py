"""tables.toml's [realtime]: who may join (and receive) and who may send on a private channel, as
rule words and as row policies over `topic` and `extension` (live/topics.py judges them)."""

from dataclasses import dataclass, field

from row_policies import parse as parse_policies
from row_policies import rule_words
from variables import ConfigError

OPERATIONS = ("select", "insert")


@dataclass(frozen=True)
class Rules:
    """The [realtime] section."""

    rules: dict  # select | insert -> rule word
    policies: dict = field(default_factory=dict)  # select | insert -> RowPolicy


def parse(entry, source="tables.toml"):
    """The Rules of the document's `realtime`, or None without one."""
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
