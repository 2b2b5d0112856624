"""The resolved embed tree: a Level per table (what it outputs, its WHERE, order and paging) and a
Child per embed under it, which writes the query of its rows for a chunk of its parents' keys."""

import functools
from dataclasses import dataclass, field

import sqlalchemy as sa

from database import statements
from extensions import db
from query.tree import SelectItem
from rest import reads
from rest.embeds.relationships import Relationship
from rest.embeds.shaping import Layout, item_key


@dataclass
class Level:
    """One table of the embed tree, resolved: what it outputs, the embeds under it, its WHERE (the
    filters on it, its owner rule, its `!inner` embeds), order and paging."""

    table: sa.FromClause
    outputs: list  # SelectItem and Child, in the order asked
    where: object = None
    order: list = field(default_factory=list)
    limit: int | None = None
    offset: int = 0
    hidden: list = field(default_factory=list)  # more columns to fetch: a write's primary key
    path: tuple = ()  # the embed's aliases from the top: the filters on it are scopes[path]
    prefix: str = ""  # of its filters' parameters in a prepared plan, which they share with others
    joins: list = field(default_factory=list)  # (subquery, ON) of each to-one spread it aggregates over
    spreads: list = field(default_factory=list)  # the Childs of those spreads (spreads.py)

    def source(self):
        """Its table, LEFT JOINed to the spreads it aggregates over."""
        found = self.table
        for joined, on in self.joins:
            found = found.outerjoin(joined, on)
        return found

    def column(self, name):
        """What the name from `needed` reads: a column, or a computed item's expression."""
        for item in self.outputs:
            if isinstance(item, SelectItem) and item.sql is not None and item_key(item) == name:
                return item.sql
        return self.table.c[name]

    def selected(self):
        return [output for output in self.outputs if isinstance(output, SelectItem)]

    @property
    def aggregated(self):
        """Whether an item of this level is an aggregate (its rows are groups)."""
        return any(item.aggregate for item in self.selected())

    @functools.cached_property
    def children(self):
        return [output for output in self.outputs if isinstance(output, Child)]

    def needed(self):
        """The columns a query on this level fetches: the ones shown, and the keys its embeds join on.
        A computed item (a JSON path, a cast) goes by a name of its own (`item_key`)."""
        names = [item_key(item) for item in self.outputs if isinstance(item, SelectItem)]
        for child in self.children:
            names += child.relationship.parent_columns
        return list(dict.fromkeys(names + self.hidden))

    @functools.cached_property
    def layout(self):
        """How this level's rows become objects (`shape`); `hidden` must be set before."""
        return Layout.of(self)

    def names(self):
        """The keys of this level's objects, spread embeds' keys included."""
        found = []
        for output in self.outputs:
            if isinstance(output, SelectItem):
                found.append(output.alias)
            elif output.spread:
                found += output.level.names()
            elif output.shown:
                found.append(output.alias)
        return found


@dataclass
class Child:
    """An embed under a Level: its relationship, its own Level, and how it shows."""

    alias: str
    relationship: Relationship
    level: Level
    inner: bool
    spread: bool
    shown: bool  # an empty `table()` filters with !inner but adds no key
    junction: sa.FromClause | None = None
    junction_where: object = None  # the junction table's owner rule
    count: str | None = None  # `comments(count)`: the key of each parent's count of rows, not rows
    name: str = ""  # the embedded table, and the columns asked of it: a plan checks it is still the
    asked: tuple = ()  # one reflected
    policy: object = None  # its policies.Policy, and its junction's, authorized for each request
    junction_policy: object = None
    statements: dict = field(default_factory=dict, repr=False)  # a plan's, by the number of keys
    joined: bool = False  # read in its parent's query, a LEFT JOIN (_joinable)

    def empty(self):
        """What a parent without a matching row shows: nothing, or a count of 0; for an embed of
        aggregates alone (`comments(count(),likes.sum())`), the one group of no rows, as PostgreSQL
        aggregates none: a count of 0, other aggregates null."""
        if self.count is not None:
            return [{self.count: 0}]
        items = [item for item in self.level.outputs if isinstance(item, SelectItem)]
        if items and all(item.aggregate for item in items):
            return [{item.alias: 0 if item.aggregate == "count" else None for item in items}]
        return []

    def exists(self, parent):
        """EXISTS (a matching row of this embed) for the parent row of table `parent`."""
        relationship, table = self.relationship, self.level.table
        source, link = self._source(), []
        holder = table if self.junction is None else self.junction
        for parent_column, child_column in zip(
            relationship.parent_columns, relationship.child_columns, strict=True
        ):
            link.append(holder.c[child_column] == parent.c[parent_column])
        where = [*link, *present(self.level.where), *present(self.junction_where)]
        return sa.exists(sa.select(sa.literal(1)).select_from(source).where(*where))

    def _source(self):
        if self.junction is None:
            return self.level.source()
        pairs = zip(self.relationship.junction_keys, self.relationship.target_keys, strict=True)
        return self.level.source().join(
            self.junction, sa.and_(*(self.junction.c[j] == self.level.table.c[t] for j, t in pairs))
        )

    def fetch(self, keys):
        """The rows of this embed for the parents' `keys` (tuples of parent_columns' values) on the
        session's connection (a write's rows read back): tuples of self.level.needed()'s values
        (or the count) followed by the key."""
        found = []
        for chunk in reads.chunks(self._key_columns(), keys):
            found += [tuple(row) for row in reads.execute(self._select(chunk)).all()]
        return found

    def statement(self, size):
        """A plan's query for `size` keys, made once: (statement, its Prepared or None, the names
        of its key parameters, `size` times the key's columns)."""
        found = self.statements.get(size)
        if found is None:
            columns = self._key_columns()
            names = [f"{self.level.prefix}k{i}_{j}" for i in range(size) for j in range(len(columns))]
            params = [
                sa.bindparam(name, type_=columns[n % len(columns)].type, required=True)
                for n, name in enumerate(names)
            ]
            if len(columns) == 1:
                chunk = columns[0].in_(params)
            else:
                step = len(columns)
                chunk = sa.tuple_(*columns).in_(
                    [sa.tuple_(*params[i : i + step]) for i in range(0, len(params), step)]
                )
            statement = self._select(chunk)
            found = (statement, statements.prepare(statement, db.engine, named=False), names)
            self.statements[size] = found
        return found

    def _key_columns(self):
        holder = self.level.table if self.junction is None else self.junction
        return [holder.c[name] for name in self.relationship.child_columns]

    def width(self):
        """The columns of a fetched row before its key."""
        return 1 if self.count is not None else len(self.level.needed())

    def _select(self, chunk):
        """The query of this embed's rows whose key `chunk` holds: in the order of their keys, so
        that each parent's rows come together, then the embed's own."""
        level, relationship, key_columns = self.level, self.relationship, self._key_columns()
        columns = [level.column(name) for name in level.needed()]
        if self.count is not None:
            columns = [sa.func.count()]
        labeled = [column.label(f"c{i}") for i, column in enumerate([*columns, *key_columns])]
        where = [chunk, *present(level.where), *present(self.junction_where)]
        statement = sa.select(*labeled).select_from(self._source()).where(*where)
        if self.count is not None:
            return statement.group_by(*key_columns)
        if level.aggregated:  # PostgREST's aggregates in an embed: grouped by its other columns
            plain = [level.column(item_key(item)) for item in level.selected() if not item.aggregate]
            return statement.group_by(*key_columns, *plain).order_by(*key_columns, *level.order)
        if relationship.many and (level.limit is not None or level.offset):
            return self._paged(statement, key_columns, len(labeled))
        return statement.order_by(*key_columns, *level.order)

    def _paged(self, statement, key_columns, width):
        """Each parent's page of rows: ROW_NUMBER() over the parent's key, in the embed's order."""
        level = self.level
        number = sa.func.row_number().over(partition_by=key_columns, order_by=level.order)
        numbered = statement.add_columns(number.label("n")).subquery("paged")
        page = numbered.c.n > level.offset
        if level.limit is not None:
            page = sa.and_(page, numbered.c.n <= level.offset + level.limit)
        return sa.select(*(numbered.c[f"c{i}"] for i in range(width))).where(page).order_by(numbered.c.n)


def present(clause):
    return [] if clause is None else [clause]


def all_of(*clauses):
    """The AND of the clauses that are not None; None when none is."""
    present = [clause for clause in clauses if clause is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else sa.and_(*present)
