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
parent's WHERE, so paging and counting see only the parents that remain.

A read's queries are planned and prepared once per shape of request, as a plain read's are
(rest/reflection.py): values, the owner's id and the parents' keys are parameters, and the queries
run straight on the DBAPI. There, a to-one embed on a unique key is a LEFT JOIN in the top query
(`_joinable` says when that reads the same rows)."""

import functools
import itertools
import operator
from dataclasses import dataclass, field, replace

import sqlalchemy as sa
from sqlalchemy.sql import visitors

import filters
from database import transactions
from errors import APIError, Rest
from extensions import db
from filters import EmbedItem, FilterError, SelectItem
from rest import policies, reads, reflection
from values import AS_THEY_ARE, json_value, row_shape


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
    path: tuple = ()  # the embed's aliases from the top: the filters on it are scopes[path]
    prefix: str = ""  # of its filters' parameters in a prepared plan, which they share with others

    def column(self, name):
        """What the name from `needed` reads: a column, or a computed item's expression."""
        for item in self.outputs:
            if isinstance(item, SelectItem) and item.sql is not None and item_key(item) == name:
                return item.sql
        return self.table.c[name]

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
        return _Layout.of(self)

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
            found = (statement, transactions.prepare(statement, db.engine, named=False), names)
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
        where = [chunk, *_present(level.where), *_present(self.junction_where)]
        statement = sa.select(*labeled).select_from(self._source()).where(*where)
        if self.count is not None:
            return statement.group_by(*key_columns)
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


def item_key(item):
    """A select item's name among a level's fetched columns: its column, or for a computed item a
    name no column can have."""
    return item.column if item.sql is None else f"\x00{item.alias}"


def _present(clause):
    return [] if clause is None else [clause]


# --- planning: the select tree against the tables


class Planner:
    """Resolves a Query's select tree from its table down: relationships, grants, filters, order."""

    def __init__(self, query, who, named=False):
        self.query = query
        self.who = who
        self.scopes = filters.scoped(query.filters)
        self.used = {()}
        self.count = 0  # embeds so far: an alias of a table already on the path is named by it
        self.named = named  # values, the owner's id and policies' values as named parameters
        self.levels = 0

    def plan(self, name, table, grant, order):
        """The top Level: the table itself under the request's grant and order."""
        level = self._level(name, table, self.query.tree, (), (name,))
        level.where = _all(level.where, grant.condition(table, named=self.named))
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
        prefix, self.levels = f"w{self.levels}_", self.levels + 1
        where = None
        if nodes:
            where = filters.build(nodes, table, reflection.dialect(), named=self.named).clause
            where = _prefixed(where, prefix) if self.named else where
        inner = [output.exists(table) for output in outputs if isinstance(output, Child) and output.inner]
        return Level(table, outputs, _all(where, *inner), path=path, prefix=prefix)

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
        level.where = _all(level.where, grant.condition(alias, named=self.named))
        settings = self.query.embedded.get(path, filters.Embedded())
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


def _prefixed(clause, prefix):
    """`clause` with its named parameters (filters.build's p0, p1, ...) renamed `prefix`p0, ...: the
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


MAX_SHAPES = 16  # prepared plans kept for one select: its filters' and grants' shapes vary


@dataclass
class _Outline:
    """The Level tree a select makes of its tables (any request's: what tables, grants and
    filters each level has), and the prepared Plans of that select by the shape of a request."""

    level: Level
    plans: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """An embedded read's top statements, prepared once for every request of its shape, as
    reflection.Plan is for a plain read: the page and its count, each (statement, its Prepared or
    None), and the Level tree whose Childs prepare their own queries, one per number of keys."""

    level: Level
    rows: tuple
    count: tuple
    names: list  # the keys of the top level's objects


def read(table, query, who, grant, offset, limit, count=False):
    """The page of the top level's rows (none when `limit` is 0), with their embeds, as JSON-ready
    dicts; their total when `count` (else None); the keys of the objects. Each query is prepared
    once per shape and runs with the request's values as parameters (the parents' keys too), those
    of one level together straight on the DBAPI (database.transactions.prepared)."""
    plan, values = _planned(table, query, who, grant, offset, limit)
    if offset:
        values["offset"] = offset
    if limit is not None:
        values["limit"] = limit
    asked = ([plan.rows] if limit != 0 else []) + ([plan.count] if count else [])
    results = _run(asked, values) if asked else []
    found = shape(plan.level, results[0], _Prepared(values)) if limit != 0 else []
    return found, results[-1][0][0] if count else None, list(plan.names)


def _planned(table, query, who, grant, offset, limit):
    """The Plan of a read, from the cache kept with reflection's plans, and the request's values.
    A select's Level tree is planned once (again when one of its tables is reflected again); each
    request then authorizes every embedded table and converts the filters' values, in the order
    the Planner does, which also gives the shape that picks the Plan."""
    scopes = filters.scoped(query.filters)
    embedded = frozenset(query.embedded.items())
    key = ("embed", table, query.select, query.order, embedded, frozenset(scopes))
    cache = reflection.schema()
    outline, made = cache.plans.get(key), None
    if outline is None or not _fresh(outline.level):
        made = _level(table, query, who, grant)
        outline = _Outline(made)
    with cache.lock:
        if cache.plans.get(key) is not outline:
            cache.plans[key] = outline
            while len(cache.plans) > reflection.MAX_PLANS:
                cache.plans.popitem(last=False)
        elif key in cache.plans:
            cache.plans.move_to_end(key)
    values = grant.plan_values()
    signature = [(grant.owner_id is not None, grant.using is not None)]
    _bind(outline.level, scopes, who, values, signature)
    shape_key = (tuple(signature), bool(offset), limit is not None)
    found = outline.plans.get(shape_key)
    if found is None:
        found = _compile(made or _level(table, query, who, grant), grant.policy, offset, limit)
        with cache.lock:
            if len(outline.plans) >= MAX_SHAPES:
                outline.plans.clear()
            outline.plans[shape_key] = found
    return found, values


def _level(table, query, who, grant):
    order = reflection.ordering(query.order, table)
    return plan(table.name, table, query, who, grant, order, named=True)


def _base(table):
    return getattr(table, "element", table)


def _fresh(level):
    """Whether each table under `level` is still the one reflected: one reflected again (a column
    added or dropped) gets a new Level tree and plans."""
    for child in level.children:
        if reflection.reflected_or_none(child.name, child.asked) is not _base(child.level.table):
            return False
        junction = child.relationship.junction
        if junction is not None and reflection.reflected_or_none(junction) is not _base(child.junction):
            return False
        if not _fresh(child.level):
            return False
    return True


def _bind(level, scopes, who, values, signature):
    """Into `values`, the request's parameters for the plans of `level`'s tree: each embedded
    table's grant (a 401/403 when its rule refuses the caller) and the filters on each level (a
    400 for one that does not convert); into `signature`, what of them decides the SQL."""
    for child in level.children:
        _grant(child.policy, who, values, signature)
        _bind(child.level, scopes, who, values, signature)
        if child.junction_policy is not None:
            _grant(child.junction_policy, who, values, signature)
    nodes = scopes.get(level.path)
    if nodes:
        built = filters.build(nodes, level.table, reflection.dialect(), named=True, express=False)
        signature.append(built.shape)
        values.update({level.prefix + name: value for name, value in built.values.items()})


def _grant(policy, who, values, signature):
    grant = policies.authorize(policy, "select", who)
    signature.append((grant.owner_id is not None, grant.using is not None))
    values.update(grant.plan_values())


def _compile(level, policy, offset, limit):
    """The Plan of a Level tree planned with named parameters, its table under `policy`. The to-one
    embeds `_joinable` allows are read in the top query: after the top level's columns, each one's
    key (NULL: no match), then its own columns."""
    columns = [level.column(name) for name in level.needed()]
    source = level.table
    for child in _joinable(level, policy):
        child.joined = True
        relationship, table = child.relationship, child.level.table
        pairs = zip(relationship.parent_columns, relationship.child_columns, strict=True)
        on = [level.table.c[parent] == table.c[key] for parent, key in pairs]
        source = source.outerjoin(table, sa.and_(*on, *_present(child.level.where)))
        columns += [table.c[relationship.child_columns[0]], *map(child.level.column, child.level.needed())]
    rows = sa.select(*(column.label(f"c{i}") for i, column in enumerate(columns))).select_from(source)
    count = sa.select(sa.func.count()).select_from(level.table)
    if level.where is not None:
        rows, count = rows.where(level.where), count.where(level.where)
    rows = rows.order_by(*level.order)
    if offset:
        rows = rows.offset(sa.bindparam("offset", type_=sa.Integer, required=True))
    if limit is not None:
        rows = rows.limit(sa.bindparam("limit", type_=sa.Integer, required=True))
    pairs = [(s, transactions.prepare(s, db.engine, named=False)) for s in (rows, count)]
    return Plan(level, *pairs, level.names())


def _joinable(level, policy):
    """The embeds of the top level its query can read with a LEFT JOIN, which saves theirs: a shown
    to-one embed of rows (not a count, no junction, not !inner) on a key unique in its table, so
    that a parent meets at most one row (a table's, not a view's). None when the top table is
    under a row policy, nor a table that is (a policy's SQL names columns without their table:
    joined, a name both tables have would be ambiguous), nor one whose name the tree uses
    elsewhere (an EXISTS would correlate with it)."""
    if "select" in policy.row_policies:
        return []
    names = _names_used(level)
    return [
        child
        for child in level.children
        if child.shown
        and not (child.relationship.many or child.inner)
        and child.count is None
        and child.junction is None
        and "select" not in child.policy.row_policies
        and names.count(child.level.table.name) == 1
        and not _base(child.level.table).info.get("view")  # its key is tables.toml's word
        and frozenset(child.relationship.child_columns) in reflection.unique_sets(child.level.table)
    ]


def _names_used(level):
    """The names of the tables (and aliases) of a Level tree's queries, each time one is used."""
    found = [level.table.name]
    for child in level.children:
        found += _names_used(child.level)
        if child.junction is not None:
            found.append(child.junction.name)
    return found


def _run(statements, values):
    """The rows (tuples) of each (statement, Prepared or None) of `statements` with `values`: all
    straight on the DBAPI when all are prepared, else through SQLAlchemy (an `in` filter's list)."""
    if all(prepared is not None for _, prepared in statements):
        return transactions.prepared(values, *(prepared for _, prepared in statements))
    connection = db.session.connection()
    return [[tuple(row) for row in connection.execute(statement, values)] for statement, _ in statements]


def _bucket(count):
    """The number of keys a query is prepared for: `count` rounded up to a power of two (the keys
    padded with the last one), so that a few statements serve every number of parents."""
    return min(reads.KEY_CHUNK, 1 << (count - 1).bit_length())


class _Prepared:
    """The embeds' rows by a Plan's statements, with one request's values."""

    def __init__(self, values):
        self.values = values

    def rows(self, asked):
        """For each (Child, keys) of `asked`, its rows: the queries of one level run together."""
        found = [[] for _ in asked]
        longest = max(len(keys) for _, keys in asked)
        for start in range(0, longest, reads.KEY_CHUNK):
            values, statements, slots = dict(self.values), [], []
            for slot, (child, keys) in enumerate(asked):
                chunk = keys[start : start + reads.KEY_CHUNK]
                if not chunk:
                    continue
                size = _bucket(len(chunk))
                statement, prepared, names = child.statement(size)
                chunk += [chunk[-1]] * (size - len(chunk))
                single = len(child.relationship.child_columns) == 1
                values.update(zip(names, chunk if single else itertools.chain(*chunk), strict=True))
                statements.append((statement, prepared))
                slots.append(slot)
            for slot, rows in zip(slots, _run(statements, values), strict=True):
                found[slot] += rows
        return found


class _Session:
    """The embeds' rows by statements made for the request, on the session's connection: a write's
    rows read back in its transaction."""

    def rows(self, asked):
        found = []
        for child, keys in asked:
            single = len(child.relationship.child_columns) == 1
            found.append(child.fetch([(key,) for key in keys] if single else keys) if keys else [])
        return found


def read_keys(level, columns, keys):
    """The top level's rows whose `columns` hold `keys`, in the order of `keys`, with their embeds:
    the rows a write returns."""
    level.hidden = list(columns)
    found = {}
    where = level.where
    for chunk in reads.chunks([level.table.c[c] for c in columns], keys):
        level.where = _all(where, chunk)
        index = [level.needed().index(column) for column in columns]
        rows = _fetch_top(level)
        for row, shaped in zip(rows, shape(level, rows, _Session()), strict=True):
            found[tuple(row[i] for i in index)] = shaped
    return [found[key] for key in keys if key in found]


def _fetch_top(level):
    columns = [level.column(name) for name in level.needed()]
    statement = sa.select(*(c.label(f"c{i}") for i, c in enumerate(columns)))
    if level.where is not None:
        statement = statement.where(level.where)
    statement = statement.order_by(*level.order)
    return [tuple(row) for row in reads.execute(statement).all()]


def _key(positions):
    """A row's key at `positions`: the value itself for one column, else a tuple."""
    return operator.itemgetter(*positions)


@dataclass(frozen=True)
class _Layout:
    """How a Level's rows (tuples of its needed() values) become objects: the select items'
    positions and columns, a function of a row to its object of items, each embed and its key's
    positions, and the keys in order."""

    items: tuple  # (position, column, whether its str, int and None are JSON as they are)
    make: object
    children: tuple  # (Child, key of a parent row, key of one of its rows)
    joined: tuple  # (Child, where its key is in a row, its objects' maker if it has no embeds)
    names: tuple
    reorder: bool  # embeds come between columns: the objects' keys are put in order after

    @classmethod
    def of(cls, level):
        index = {name: i for i, name in enumerate(level.needed())}
        selected = [output for output in level.outputs if isinstance(output, SelectItem)]
        positions = [index[item_key(item)] for item in selected]
        children, joined, end, inside = [], [], len(index), []
        for child in level.children:
            if child.joined:
                make = None
                if not child.level.children:  # its object is made from the parent's row
                    own = [(end + 1 + i, column, plain) for i, column, plain in child.level.layout.items]
                    inside += own
                    make = _maker(tuple(child.level.names()), tuple(i for i, _, _ in own))
                joined.append((child, end, make))
                end += 1 + child.width()
                continue
            width, size = child.width(), len(child.relationship.child_columns)
            parent = _key([index[name] for name in child.relationship.parent_columns])
            children.append((child, parent, _key(range(width, width + size))))
        made = [item.alias for item in selected]
        for child in level.children:
            if child.shown:
                made += child.level.names() if child.spread else [child.alias]
        names = tuple(dict.fromkeys(level.names()))
        shape = row_shape(level.table, selected)
        items = tuple((i, column, plain) for i, (_, column, plain) in zip(positions, shape, strict=True))
        items += tuple(inside)
        make = _maker(tuple(item.alias for item in selected), tuple(positions))
        reorder = tuple(dict.fromkeys(made)) != names
        return cls(items, make, tuple(children), tuple(joined), names, reorder)


@functools.lru_cache(maxsize=256)
def _maker(aliases, positions):
    """A function of a row to the dict of `aliases` to its values at `positions`: a dict display,
    which makes a dict several times faster than a loop or dict(zip()). The aliases are bound as
    names of its own (a0, a1, ...), never written into the source."""
    pairs = ", ".join(f"a{n}: row[{position}]" for n, position in enumerate(positions))
    names = {f"a{n}": alias for n, alias in enumerate(aliases)}
    return eval(f"lambda row: {{{pairs}}}", names)


def shape(level, found, source):
    """Rows of `level` (tuples of level.needed()'s values, perhaps more after them) as dicts, the
    rows of each embed fetched by `source` (_Prepared or _Session) for all of them at once."""
    layout = level.layout
    values = _json_values(layout, found)
    objects = list(map(layout.make, values))
    if not layout.children and not layout.joined:
        return objects
    asked, parents = [], []
    for child, parent, _ in layout.children:
        keys = list(map(parent, found))
        parents.append(keys)
        present = set(keys)
        if len(child.relationship.parent_columns) == 1:
            present.discard(None)
        else:
            present = {key for key in present if None not in key}
        asked.append((child, list(present)))
    fetched = source.rows(asked) if any(keys for _, keys in asked) else [[] for _ in asked]
    attached = {}
    for (child, _, key), keys, rows in zip(layout.children, parents, fetched, strict=True):
        if child.shown:
            attached[id(child)] = (keys, _grouped(child, rows, key, source))
    for child, start, make in layout.joined:
        if make is None:
            matched = [row[start + 1 :] for row in found if row[start] is not None]
            shaped = iter(shape(child.level, matched, source))
            attached[id(child)] = [None if row[start] is None else next(shaped) for row in found]
        else:
            attached[id(child)] = [None if row[start] is None else make(row) for row in values]
    for child in level.children:
        if child.joined:
            _attach_each(child, objects, attached[id(child)])
        elif id(child) in attached:
            _attach(child, objects, *attached[id(child)])
    if layout.reorder:
        objects = [{name: one[name] for name in layout.names} for one in objects]
    return objects


def _json_values(layout, rows):
    """`rows` with the values of the items at their positions as JSON values (values.json_value):
    the rows themselves when each such column holds only text, integers and NULLs, which are."""
    converted = None
    for position, column, plain in layout.items:
        if plain and set(map(type, map(operator.itemgetter(position), rows))) <= AS_THEY_ARE:
            continue
        if converted is None:
            converted = [list(row) for row in rows]
        for row in converted:
            row[position] = json_value(column, row[position])
    return rows if converted is None else converted


def _grouped(child, rows, key, source):
    """An embed's matches by the key of the parent they belong to: its objects in their order, or
    for a to-one embed its object (the first)."""
    if child.count is not None:
        return {key(row): [{child.count: row[0]}] for row in rows}
    keys, objects = list(map(key, rows)), shape(child.level, rows, source)
    if not child.relationship.many:
        return dict(zip(reversed(keys), reversed(objects), strict=True))
    grouped = {}
    for found, one in zip(keys, objects, strict=True):
        matches = grouped.get(found)
        if matches is None:
            grouped[found] = [one]
        else:
            matches.append(one)
    return grouped


def _attach_each(child, objects, matches):
    """Each parent's match of a joined to-one `child` (None: none), as it shows it."""
    if child.spread:
        names = child.level.names()
        for one, match in zip(objects, matches, strict=True):
            for name in names:
                one[name] = None if match is None else match[name]
    else:
        alias = child.alias
        for one, match in zip(objects, matches, strict=True):
            one[alias] = match


def _attach(child, objects, keys, grouped):
    """Each parent's matches of `child` (`grouped` by the parents' `keys`), as it shows them."""
    alias, many = child.alias, child.relationship.many
    if child.count is not None:
        for one, key in zip(objects, keys, strict=True):
            counted = grouped.get(key) or child.empty()
            one[alias] = counted if many else counted[0]
    elif child.spread and many:
        # PostgREST's spread of a to-many embed: each column becomes an array, in the rows' order,
        # the arrays correlated (their n-th values come from one row).
        names = child.level.names()
        for one, key in zip(objects, keys, strict=True):
            matches = grouped.get(key) or []
            for name in names:
                one[name] = [match[name] for match in matches]
    elif child.spread:
        names = child.level.names()
        for one, key in zip(objects, keys, strict=True):
            match = grouped.get(key)
            for name in names:
                one[name] = None if match is None else match[name]
    elif many:
        for one, key in zip(objects, keys, strict=True):
            one[alias] = grouped.get(key) or []
    else:
        for one, key in zip(objects, keys, strict=True):
            one[alias] = grouped.get(key)
