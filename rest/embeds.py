"""Embedding related rows in a read (`select=*,author:users(username),comments(*)`), as PostgREST
does: which relationship an embed means, who may read it, and the queries that fetch it.

Relationships are the foreign keys rest/reflection.py found when it reflected a table, declared in the
database or in tables.toml's `references`: many-to-one (an object or null), one-to-one (the same,
when the key is also unique on the other side), one-to-many (an array) and many-to-many through a
junction table whose primary key (or one unique key) holds a foreign key to each side.

An embedded table is read under its own `select` rule, as a direct read would be: a table tables.toml
does not list does not exist (no relationship), a rule that refuses the caller is a 401/403, and an
owner rule embeds the caller's rows only. Each embed level is one query over all the parent rows
(`IN` over their keys, KEY_CHUNK at a time), never one per row; `!inner` is an EXISTS in the
parent's WHERE, so paging and counting see only the parents that remain."""

from dataclasses import dataclass, field, replace

import sqlalchemy as sa

import filters
from errors import APIError, Rest
from filters import EmbedItem, FilterError, SelectItem
from rest import policies, reads, reflection
from values import json_value


@dataclass(frozen=True)
class Relationship:
    """How rows of `target` relate to a parent's rows: the parent's `parent_columns` equal the
    child's `child_columns`, or, through a junction, the junction's `child_columns`, whose row also
    holds the target's `target_keys` in its `junction_keys`."""

    target: str
    many: bool
    parent_columns: tuple
    child_columns: tuple
    junction: str | None = None
    junction_keys: tuple = ()
    target_keys: tuple = ()
    names: frozenset = frozenset()  # what a hint may name: the constraint, its columns, the junction
    label: str = ""  # the hint that picks it, for the 300 listing the choices
    kind: str = "many-to-one"  # or one-to-one, one-to-many, many-to-many: for the 300's details


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

    def column(self, name):
        """What the name from `needed` reads: a column, or a computed item's expression."""
        for item in self.outputs:
            if isinstance(item, SelectItem) and item.sql is not None and item_key(item) == name:
                return item.sql
        return self.table.c[name]

    @property
    def children(self):
        return [output for output in self.outputs if isinstance(output, Child)]

    def needed(self):
        """The columns a query on this level fetches: the ones shown, and the keys its embeds join on.
        A computed item (a JSON path, a cast) goes by a name of its own (`item_key`)."""
        names = [item_key(item) for item in self.outputs if isinstance(item, SelectItem)]
        for child in self.children:
            names += child.relationship.parent_columns
        return list(dict.fromkeys(names + self.hidden))

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

    def empty(self):
        """What a parent without a matching row shows: nothing, or a count of 0."""
        return [] if self.count is None else [{self.count: 0}]

    def exists(self, parent):
        """EXISTS (a matching row of this embed) for the parent row of table `parent`."""
        relationship, table = self.relationship, self.level.table
        source, link = self._source(), []
        holder = table if self.junction is None else self.junction
        for parent_column, child_column in zip(
            relationship.parent_columns, relationship.child_columns, strict=True
        ):
            link.append(holder.c[child_column] == parent.c[parent_column])
        where = [*link, *_present(self.level.where), *_present(self.junction_where)]
        return sa.exists(sa.select(sa.literal(1)).select_from(source).where(*where))

    def _source(self):
        if self.junction is None:
            return self.level.table
        pairs = zip(self.relationship.junction_keys, self.relationship.target_keys, strict=True)
        return self.level.table.join(
            self.junction, sa.and_(*(self.junction.c[j] == self.level.table.c[t] for j, t in pairs))
        )

    def fetch(self, keys):
        """The rows of this embed for the parents' `keys` (tuples of parent_columns' values), as
        (key, row) pairs in order; a row is a tuple of self.level.needed()'s values."""
        level, relationship = self.level, self.relationship
        holder = level.table if self.junction is None else self.junction
        key_columns = [holder.c[name] for name in relationship.child_columns]
        columns = [level.column(name) for name in level.needed()]
        if self.count is not None:
            columns = [sa.func.count()]
        labeled = [column.label(f"c{i}") for i, column in enumerate([*columns, *key_columns])]
        found = []
        for chunk in reads.chunks(key_columns, keys):
            where = [chunk, *_present(level.where), *_present(self.junction_where)]
            statement = sa.select(*labeled).select_from(self._source()).where(*where)
            if self.count is not None:
                statement = statement.group_by(*key_columns)
            elif relationship.many and (level.limit is not None or level.offset):
                statement = self._paged(statement, key_columns, len(labeled))
            else:
                statement = statement.order_by(*level.order)
            width = len(columns)
            found += [(tuple(row[width:]), tuple(row[:width])) for row in reads.execute(statement).all()]
        return found

    def _paged(self, statement, key_columns, width):
        """Each parent's page of rows: ROW_NUMBER() over the parent's key, in the embed's order."""
        level = self.level
        number = sa.func.row_number().over(partition_by=key_columns, order_by=level.order)
        numbered = statement.add_columns(number.label("n")).subquery("paged")
        page = numbered.c.n > level.offset
        if level.limit is not None:
            page = sa.and_(page, numbered.c.n <= level.offset + level.limit)
        return sa.select(*(numbered.c[f"c{i}"] for i in range(width))).where(page).order_by(numbered.c.n)


def item_key(item):
    """A select item's name among a level's fetched columns: its column, or for a computed item a
    name no column can have."""
    return item.column if item.sql is None else f"\x00{item.alias}"


def _present(clause):
    return [] if clause is None else [clause]


# --- planning: the select tree against the tables


class Planner:
    """Resolves a Query's select tree from its table down: relationships, grants, filters, order."""

    def __init__(self, query, who):
        self.query = query
        self.who = who
        self.scopes = filters.scoped(query.filters)
        self.used = {()}
        self.count = 0  # embeds so far: an alias of a table already on the path is named by it

    def plan(self, name, table, grant, order):
        """The top Level: the table itself under the request's grant and order."""
        level = self._level(name, table, self.query.tree, (), (name,))
        level.where = _all(level.where, grant.condition(table))
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
        for item in items:
            if isinstance(item, EmbedItem):
                outputs.append(self._child(name, table, item, (*path, item.alias), chain))
            else:
                outputs += filters.resolve_select([item], table)
        nodes = self.scopes.get(path, [])
        where = filters.where_clause(nodes, table, reflection.dialect()) if nodes else None
        inner = [output.exists(table) for output in outputs if isinstance(output, Child) and output.inner]
        return Level(table, outputs, _all(where, *inner))

    def _child(self, parent_name, parent, item, path, chain):
        self.used.add(path)
        item, column = _by_column(parent, item)
        policy = policies.policies().get(item.table)
        asked = [i.column for i in item.items if isinstance(i, SelectItem) and i is not filters.STAR]
        target = reflection.reflected_or_none(item.table, asked) if policy is not None else None
        relationship = _relationship(parent_name, parent, item, target, column)
        grant = policies.authorize(policy, "select", self.who)
        self.count += 1
        taken = set(chain) | ({relationship.junction} if relationship.junction else set())
        alias = target.alias(f"e{self.count}") if item.table in taken else target
        counted = _counted(item, target)
        level = self._level(item.table, alias, () if counted else item.items, path, (*chain, item.table))
        level.where = _all(level.where, grant.condition(alias))
        settings = self.query.embedded.get(path, filters.Embedded())
        level.order = reflection.ordering(settings.order, alias)
        level.limit, level.offset = settings.limit, settings.offset
        child = Child(
            item.alias, relationship, level, item.inner, item.spread, bool(item.items), count=counted
        )
        if relationship.junction is not None:
            junction_policy = policies.policies()[relationship.junction]
            junction_grant = policies.authorize(junction_policy, "select", self.who)
            junction = reflection.reflected(relationship.junction)
            child.junction = junction.alias(f"j{self.count}") if relationship.junction in chain else junction
            child.junction_where = junction_grant.condition(child.junction)
        return child


def _counted(item, target):
    """`comments(count)` (or `comments(n:count)`) on a table without a count column: the alias of
    each parent's count of rows; None for an embed of rows."""
    if item.spread or len(item.items) != 1 or "count" in target.c:
        return None
    only = item.items[0]
    return only.alias if isinstance(only, SelectItem) and only.column == "count" else None


def _all(*clauses):
    """The AND of the clauses that are not None; None when none is."""
    present = [clause for clause in clauses if clause is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else sa.and_(*present)


def plan(name, table, query, who, grant, order):
    """The Level tree of a read: the table `name` and, under it, each embed of the query's select."""
    return Planner(query, who).plan(name, table, grant, order)


# --- relationships


def _detail(parent_name, table, relationship):
    """One relationship that fits, as PostgREST's PGRST201 lists it."""
    name = relationship.label.partition("!")[2] or relationship.label
    return {
        "cardinality": relationship.kind,
        "embedding": f"{parent_name} with {table}",
        "relationship": name,
    }


def _by_column(parent, item):
    """`author_id(*)`: an embed named by a foreign key column of the parent (that is no listed
    table's name) is an embed of the table the key points to, through that key. The item for that
    table, and the column (None for an embed named by its table)."""
    if item.table in policies.policies() or item.table not in parent.c:
        return item, None
    for reference in reflection.references(parent):
        if reference.columns == (item.table,):
            return replace(item, table=reference.target, hint=item.hint or item.table), item.table
    return item, None


def _relationship(parent_name, parent, item, target, column=None):
    """The one relationship `item` names between the parent table and item.table: a 400 when there
    is none (or the table does not exist for the API), a 300 when several fit and no hint picks one.
    A table that references itself has one key and two directions; PostgREST's convention picks
    one: named by the key's column (`parent_id(*)`), the row it points to; named by the table,
    with or without a hint (`children:items!parent_id(*)`), the rows that point to this one."""
    found = [] if target is None else candidates(parent_name, parent, item.table, target)
    if parent_name == item.table:
        if column is not None:
            found = [r for r in found if r.kind == "many-to-one" and r.parent_columns == (column,)]
        else:
            found = [r for r in found if r.kind != "many-to-one"]
    if item.hint is not None:
        found = [r for r in found if item.hint in r.names]
    if not found:
        hinted = f" with the hint '{item.hint}'" if item.hint else ""
        raise APIError(
            400,
            Rest.NO_RELATIONSHIP,
            f"Could not find a relationship between '{parent_name}' and '{item.table}'{hinted}",
            hint="Embedding follows foreign keys (or references in tables.toml) between exposed tables",
        )
    if len(found) > 1:
        choices = ", ".join(f"'{r.label}'" for r in found)
        raise APIError(
            300,
            Rest.AMBIGUOUS_RELATIONSHIP,
            f"Could not embed because more than one relationship was found for '{parent_name}' and "
            f"'{item.table}'",
            hint=f"Try changing '{item.table}' to one of the following: {choices}",
            details=[_detail(parent_name, item.table, r) for r in found],
        )
    return found[0]


def candidates(parent_name, parent, target_name, target):
    """Every relationship between the two tables: the parent's keys to the target, the target's keys
    to the parent, and junctions between them."""
    found = []
    for reference in reflection.references(parent):
        if reference.target == target_name and all(c in target.c for c in reference.target_columns):
            found.append(
                Relationship(
                    target_name,
                    False,
                    reference.columns,
                    reference.target_columns,
                    names=_names(reference),
                    label=f"{target_name}!{_hint(reference)}",
                )
            )
    for reference in reflection.references(target):
        if reference.target == parent_name and all(c in parent.c for c in reference.target_columns):
            unique = frozenset(reference.columns) in reflection.unique_sets(target)
            found.append(
                Relationship(
                    target_name,
                    not unique,
                    reference.target_columns,
                    reference.columns,
                    names=_names(reference),
                    label=f"{target_name}!{_hint(reference)}",
                    kind="one-to-one" if unique else "one-to-many",
                )
            )
    return found + _through_junctions(parent_name, parent, target_name, target)


def _through_junctions(parent_name, parent, target_name, target):
    found = []
    for name in policies.policies():
        if name in (parent_name, target_name):
            continue
        junction = reflection.reflected_or_none(name)
        if junction is None:
            continue
        keys = [set(key) for key in reflection.unique_sets(junction)]
        to_parent = [r for r in reflection.references(junction) if r.target == parent_name]
        to_target = [r for r in reflection.references(junction) if r.target == target_name]
        for left in to_parent:
            for right in to_target:
                joined = set(left.columns) | set(right.columns)
                if left is right or not any(joined <= key for key in keys):
                    continue
                if not all(c in parent.c for c in left.target_columns):
                    continue
                if not all(c in target.c for c in right.target_columns):
                    continue
                found.append(
                    Relationship(
                        target_name,
                        True,
                        left.target_columns,
                        left.columns,
                        name,
                        right.columns,
                        right.target_columns,
                        frozenset({name} | {r.name for r in (left, right) if r.name}),
                        f"{target_name}!{name}",
                        "many-to-many",
                    )
                )
    return found


def _names(reference):
    return frozenset({*reference.columns, *([reference.name] if reference.name else [])})


def _hint(reference):
    return reference.name or ",".join(reference.columns)


# --- reading


def read_keys(level, columns, keys):
    """The top level's rows whose `columns` hold `keys`, in the order of `keys`, with their embeds:
    the rows a write returns."""
    level.hidden = list(columns)
    found = {}
    where = level.where
    for chunk in reads.chunks([level.table.c[c] for c in columns], keys):
        level.where = _all(where, chunk)
        index = [level.needed().index(column) for column in columns]
        rows = _fetch_top(level, 0, None)
        for row, shaped in zip(rows, shape(level, rows), strict=True):
            found[tuple(row[i] for i in index)] = shaped
    return [found[key] for key in keys if key in found]


def read(level, offset, limit):
    """The top level's rows, with their embeds, as JSON-ready dicts."""
    return shape(level, _fetch_top(level, offset, limit))


def _fetch_top(level, offset, limit):
    needed = level.needed()
    columns = [level.column(name) for name in needed]
    statement = sa.select(*(c.label(f"c{i}") for i, c in enumerate(columns)))
    if level.where is not None:
        statement = statement.where(level.where)
    statement = statement.order_by(*level.order)
    if offset:
        statement = statement.offset(offset)
    if limit is not None:
        statement = statement.limit(limit)
    return [tuple(row) for row in reads.execute(statement).all()]


def shape(level, found):
    """Rows of `level` (tuples of level.needed()'s values) as dicts, their embeds fetched with one
    query per embed for all of the rows."""
    index = {name: i for i, name in enumerate(level.needed())}
    embedded = {}
    for child in level.children:
        columns = [index[name] for name in child.relationship.parent_columns]
        keys = {tuple(row[i] for i in columns) for row in found}
        keys = [key for key in keys if None not in key]
        fetched = child.fetch(keys) if keys else []
        grouped = {}
        if child.count is not None:
            grouped = {key: [{child.count: row[0]}] for key, row in fetched}
        else:
            shaped = shape(child.level, [row for _, row in fetched])
            for (key, _), one in zip(fetched, shaped, strict=True):
                grouped.setdefault(key, []).append(one)
        embedded[id(child)] = (columns, grouped)
    steps = [
        (output.alias, level.column(item_key(output)), index[item_key(output)])
        if isinstance(output, SelectItem)
        else (output, *embedded[id(output)])
        for output in level.outputs
    ]
    return [_object(steps, row) for row in found]


def _object(steps, row):
    """One row as a dict: `steps` are (alias, column, position) for a column, (Child, key
    positions, the Child's rows by key) for an embed."""
    result = {}
    for output, where, found in steps:
        if isinstance(output, str):
            result[output] = json_value(where, row[found])
            continue
        matches = found.get(tuple(row[i] for i in where)) or output.empty()
        if not output.shown:
            continue
        if output.spread and output.relationship.many:
            # PostgREST's spread of a to-many embed: each column becomes an array, in the rows'
            # order, the arrays correlated (their n-th values come from one row).
            for name in output.level.names():
                result[name] = [one[name] for one in matches]
        elif output.spread:
            one = matches[0] if matches else None
            for name in output.level.names():
                result[name] = None if one is None else one[name]
        elif output.relationship.many:
            result[output.alias] = matches
        else:
            result[output.alias] = matches[0] if matches else None
    return result
