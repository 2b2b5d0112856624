"""A request's query string, parsed whole into a Query: what it asks of a table before the table is
known (PostgREST's ApiRequest/QueryParams).

Pure: no Flask, no I/O, no database connection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from query.fields import field_name
from query.filters import filters_and_names, parse_embedded
from query.select import parse_select_tree
from query.tree import STAR, EmbedItem, SelectItem

NOTHING_EMBEDDED = MappingProxyType({})


@dataclass(frozen=True)
class Query:
    """What a request asks of a table before the table is known: filter nodes (an embedded
    resource's among them, with their path), the select tree, raw order, the order and paging of
    embedded resources by path, and `names`, the table's own columns it uses: when the reflected
    table lacks one, it is reflected again. `scoped`: a filter names an embedded resource; `plain`:
    nothing of it concerns another table (no embed, no embedded filter or paging). Immutable all
    through (tuples, a read-only mapping): one Query serves every request sent with its text."""

    filters: tuple
    select: str | None = None
    order: str | None = None
    tree: tuple = (STAR,)
    embedded: Mapping = dataclasses.field(default_factory=lambda: NOTHING_EMBEDDED)
    names: frozenset = frozenset()
    scoped: bool = False
    plain: bool = True

    def embeds(self) -> bool:
        return any(isinstance(item, EmbedItem) for item in self.tree)

    def aggregates(self) -> bool:
        """Whether the table's own select has an aggregate."""
        return any(isinstance(item, SelectItem) and item.aggregate for item in self.tree)

    def aggregates_anywhere(self) -> bool:
        """Whether the select has an aggregate, in an embedded resource's items too."""
        pending = list(self.tree)
        while pending:
            item = pending.pop()
            if isinstance(item, EmbedItem):
                pending += item.items
            elif item.aggregate:
                return True
        return False

    def computed(self) -> bool:
        """Whether a select item is more than a column: a JSON path, a cast or an aggregate."""
        return any(isinstance(item, SelectItem) and not item.plain for item in self.tree)

    def embeds_only(self) -> Query:
        """This query without the table's own filters: what shapes the embeds of a write's rows."""
        return dataclasses.replace(self, filters=())


def _order_field(part: str) -> str:
    """An order item's field text, without its modifiers (a JSON path's keys hold no dot)."""
    part = part.strip()
    if part.startswith('"'):
        end = part.find('"', 1)
        return part if end < 0 else part[: end + 1] + part[end + 1 :].split(".")[0]
    return part.split(".")[0].strip()


def parse_query(
    pairs: Iterable[tuple[str, str]], select: str | None = None, order: str | None = None
) -> Query:
    """The Query of a query string's (key, value) pairs, its select= and its order=."""
    pairs = list(pairs)
    nodes, names, scoped = filters_and_names(pairs)
    tree = parse_select_tree(select)
    embedded = parse_embedded(pairs)
    names |= {item.column for item in tree if isinstance(item, SelectItem)}
    names |= {field_name(_order_field(part)) for part in (order or "").split(",")}
    embeds = any(isinstance(item, EmbedItem) for item in tree)
    plain = not (embeds or embedded or scoped)
    return Query(
        tuple(nodes),
        select,
        order,
        tree,
        MappingProxyType(embedded),
        frozenset(names - {"", "*"}),
        scoped,
        plain,
    )
