"""tables.toml's [buckets.NAME]: Storage's buckets, made or updated at start (storage/buckets.py), with
who may do what in each and the row policies over their objects."""

import re
from dataclasses import dataclass

from row_policies import OPERATIONS, rule_words
from row_policies import parse as row_policies_section
from variables import ConfigError, parse_size

BUCKET_KEYS = frozenset({*OPERATIONS, "public", "file_size_limit", "allowed_mime_types", "policies"})
# Letters, digits, '-', '_' and '.', as S3 and Supabase allow, not starting with a dot.
BUCKET_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}")
MIME_PATTERN = re.compile(r"[a-z0-9!#$&^_.+-]+/(\*|[a-z0-9!#$&^_.+-]+)")


@dataclass(frozen=True)
class Declared:
    """A [buckets.NAME] of tables.toml."""

    id: str
    public: bool
    file_size_limit: int | None
    allowed_mime_types: tuple | None
    rules: dict
    policies: dict


def parse(entries, source="tables.toml"):
    """{bucket name: Declared} from the document's `buckets`."""
    if not isinstance(entries, dict):
        raise ConfigError(f"{source}: 'buckets' must be a table of [buckets.NAME] sections")
    return {name: _declared(name, entry, source) for name, entry in entries.items()}


def _declared(name, entry, source):
    where = f"{source}: [buckets.{name}]"
    if not BUCKET_ID.fullmatch(name):
        raise ConfigError(f"{where}: a bucket name is 1 to 63 letters, digits, '-', '_' or '.'")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table of settings and rules")
    unknown = sorted(set(entry) - BUCKET_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(sorted(BUCKET_KEYS))}")
    public = entry.get("public", False)
    if not isinstance(public, bool):
        raise ConfigError(f"{where}: public must be true or false")
    limit = entry.get("file_size_limit")
    if limit is not None and not parse_size(limit):
        raise ConfigError(
            f"{where}: file_size_limit must be a size such as 5MB or a number of bytes, under 8EB"
        )
    types = entry.get("allowed_mime_types")
    if types is not None and (
        not isinstance(types, list)
        or not all(isinstance(t, str) and MIME_PATTERN.fullmatch(t) for t in types)
    ):
        raise ConfigError(
            f'{where}: allowed_mime_types must be a list such as ["image/*", "application/pdf"]'
        )
    rules = rule_words(where, entry)
    size = parse_size(limit) if limit is not None else None
    policies = row_policies_section(where, name, entry.get("policies", {}))
    return Declared(name, public, size, tuple(types) if types is not None else None, rules, policies)
