"""Planning: a Query's select tree against the tables, from the top table down: each embed's
relationship, its table's grant, the filters, order and paging on it."""

import sqlalchemy as sa
from sqlalchemy.sql import visitors

from errors import APIError, Rest
from query import resolve, sql, tree
from query.tree import EmbedItem, FilterError, SelectItem
from rest import policies, reflection
from rest.embeds import spreads
from rest.embeds.levels import Child, Level, all_of
from rest.embeds.relationships import by_column, by_constraint, find_relationship


class Planner:
    """Resolves a Query's select tree from its table down: relationships, grants, filters, order."""

    def __init__(self, query, who, named=False):
        self.query = query
        self.who = who
        self.scopes = resolve.scoped(query.filters)
        self.used = {()}
        self.count = 0  # embeds so far: an alias of a table already on the path is named by it
        self.named = named  # values, the owner's id and policies' values as named parameters
        self.levels = 0

    def plan(self, name, table, grant, order):
        """The top Level: the table itself under the request's grant and order."""
        level = self._level(name, table, self.query.tree, (), (name,))
        level.where = all_of(level.where, grant.condition(table, named=self.named))
        level.order = order
        unknown = sorted((set(self.scopes) | set(self.query.embedded)) - self.used)
        if unknown:
            raise FilterError(
                f"{'.'.join(unknown[0])!r} is not an embedded resource of this request",
                hint="filter, order and page an embed by its alias (or table name) in select",
            )
        return level

    def _level(self, name, table, items, path, chain):
        """`chain`: the tables from the top to this one, whose names an embed's query may not reuse
        (a correlated EXISTS would take the outer table for its own)."""
        outputs = []
        _check_embed_names(name, items, len(path) + 1)
        hoisting = spreads.aggregated(items)
        for item in items:
            if isinstance(item, EmbedItem):
                outputs.append(self._child(name, table, item, (*path, item.alias), chain))
            else:
                outputs += _resolved(item, name, table, path, hoisting)
        joins, hoisted = [], []
        if hoisting:
            outputs = spreads.hoisted(table, outputs, joins, hoisted)
        if any(getattr(output, "aggregate", None) for output in outputs):
            if any(isinstance(output, Child) for output in outputs):
                raise FilterError(
                    "aggregates beside embedded resources are not supported (beside to-one spreads they are)"
                )
        nodes = self.scopes.get(path, [])
        prefix, self.levels = f"w{self.levels}_", self.levels + 1
        where = None
        if nodes:
            where = sql.build(nodes, table, reflection.dialect(), named=self.named).clause
            where = _prefixed(where, prefix) if self.named else where
        inner = [output.exists(table) for output in outputs if isinstance(output, Child) and output.inner]
        return Level(
            table, outputs, all_of(where, *inner), path=path, prefix=prefix, joins=joins, spreads=hoisted
        )

    def _child(self, parent_name, parent, item, path, chain):
        self.used.add(path)
        item, column = by_column(parent, item)
        if column is None:
            item = by_constraint(parent_name, parent, item)
        policy = policies.policies().get(item.table)
        asked = [i.column for i in item.items if isinstance(i, SelectItem) and i is not tree.STAR]
        target = reflection.reflected_or_none(item.table, asked) if policy is not None else None
        relationship = find_relationship(parent_name, parent, item, target, column)
        grant = policies.authorize(policy, "select", self.who)
        self.count += 1
        taken = set(chain) | ({relationship.junction} if relationship.junction else set())
        alias = target.alias(f"e{self.count}") if item.table in taken else target
        counted = _counted(item, target)
        level = self._level(item.table, alias, () if counted else item.items, path, (*chain, item.table))
        if item.spread and relationship.many and (level.aggregated or spreads.aggregated(item.items)):
            raise spreads.refuse_to_many()
        level.where = all_of(level.where, grant.condition(alias, named=self.named))
        settings = self.query.embedded.get(path, tree.Embedded())
        level.order = reflection.ordering(settings.order, alias)
        level.limit, level.offset = settings.limit, settings.offset
        child = Child(
            item.alias, relationship, level, item.inner, item.spread, bool(item.items), count=counted,
            name=item.table, asked=tuple(asked), policy=policy,
        )  # fmt: skip
        if relationship.junction is not None:
            junction_policy = child.junction_policy = policies.policies()[relationship.junction]
            junction_grant = policies.authorize(junction_policy, "select", self.who)
            junction = reflection.reflected(relationship.junction)
            child.junction = junction.alias(f"j{self.count}") if relationship.junction in chain else junction
            child.junction_where = junction_grant.condition(child.junction, named=self.named)
        return child


def _resolved(item, name, table, path, hoisting):
    """A select item of the level `path` on table `name`. An embedded table is PostgREST's
    `name_depth` in its query, and so in PostgreSQL's 42703 (`column messages_1.sum does not exist`)."""
    try:
        return resolve.resolve_select([item], table, aggregates=bool(path) or hoisting)
    except FilterError as exc:
        if not path or exc.kind != "column":
            raise
        named = f"{name}_{len(path)}."
        message = str(exc).replace(f" {name}.", f" {named}", 1)
        hint = exc.hint and exc.hint.replace(f'"{name}.', f'"{named}', 1)
        raise FilterError(message, hint=hint, kind="column") from None


def _check_embed_names(name, items, depth):
    """Two embeds of one level under one name: PostgREST names each embed's subquery after its
    parent, its name and its depth, and PostgreSQL refuses the second (42712): alias one of them."""
    seen = set()
    for item in items:
        if isinstance(item, EmbedItem):
            if item.alias in seen:
                raise APIError(
                    400,
                    Rest.DUPLICATE_ALIAS,
                    f'table name "{name}_{item.alias}_{depth}" specified more than once',
                )
            seen.add(item.alias)


def _counted(item, target):
    """`comments(count)` (or `comments(n:count)`) on a table without a count column: the alias of
    each parent's count of rows; None for an embed of rows."""
    if item.spread or len(item.items) != 1 or "count" in target.c:
        return None
    only = item.items[0]
    return only.alias if isinstance(only, SelectItem) and only.column == "count" else None


def _prefixed(clause, prefix):
    """`clause` with its named parameters (sql.build's p0, p1, ...) renamed `prefix`p0, ...: the
    filters of each level share one statement's names with the others'."""

    def renamed(element):
        if isinstance(element, sa.BindParameter) and element.required:
            kind, expanding = element.type, element.expanding
            return sa.bindparam(prefix + element.key, type_=kind, expanding=expanding, required=True)
        return None

    return visitors.replacement_traverse(clause, {}, renamed)


def plan(name, table, query, who, grant, order, named=False):
    """The Level tree of a read: the table `name` and, under it, each embed of the query's select.
    `named`: for a prepared plan, whose every value is a parameter (`read`)."""
    return Planner(query, who, named).plan(name, table, grant, order)
