"""Reading: an embedded read's queries, planned and prepared once per shape of request as a plain
read's are (rest/plans.py), run with each request's values; and a write's rows read back with
their embeds in its transaction."""

import itertools
from dataclasses import dataclass, field

import sqlalchemy as sa

from database import statements
from extensions import db
from query import resolve, sql
from rest import plans, policies, reads, reflection
from rest.embeds.levels import Level, all_of, present
from rest.embeds.planner import plan
from rest.embeds.shaping import item_key, shape

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
    plans.Plan is for a plain read: the page and its count, each (statement, its Prepared or
    None), and the Level tree whose Childs prepare their own queries, one per number of keys."""

    level: Level
    rows: tuple
    count: tuple
    names: list  # the keys of the top level's objects


def read(table, query, who, grant, offset, limit, count=False):
    """The page of the top level's rows (none when `limit` is 0), with their embeds, as JSON-ready
    dicts; their total when `count` (else None); the keys of the objects; whether every value in
    them is text, an integer or null (_Prepared.plain). Each query is prepared
    once per shape and runs with the request's values as parameters (the parents' keys too), those
    of one level together straight on the DBAPI (database.statements.prepared)."""
    plan, values = _planned(table, query, who, grant, offset, limit)
    if offset:
        values["offset"] = offset
    if limit is not None:
        values["limit"] = limit
    asked = ([plan.rows] if limit != 0 else []) + ([plan.count] if count else [])
    results = _run(asked, values) if asked else []
    source = _Prepared(values)
    found = shape(plan.level, results[0], source) if limit != 0 else []
    return found, results[-1][0][0] if count else None, list(plan.names), source.plain


def _planned(table, query, who, grant, offset, limit):
    """The Plan of a read, from the cache the plain reads' plans are kept in, and the request's values.
    A select's Level tree is planned once (again when one of its tables is reflected again); each
    request then authorizes every embedded table and converts the filters' values, in the order
    the Planner does, which also gives the shape that picks the Plan."""
    scopes = resolve.scoped(query.filters)
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
            while len(cache.plans) > plans.MAX_PLANS:
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
    level = plan(table.name, table, query, who, grant, order, named=True)
    if level.aggregated:  # grouped: in the order asked, else the groups' own (the key is none of theirs)
        asked = resolve.parse_order(query.order, table) if query.order else []
        level.order = sql.order_clauses(asked, table, reflection.dialect())
    return level


def _base(table):
    return getattr(table, "element", table)


def _fresh(level):
    """Whether each table under `level` is still the one reflected: one reflected again (a column
    added or dropped) gets a new Level tree and plans."""
    for child in level.children + level.spreads:
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
    for child in level.children + level.spreads:
        _grant(child.policy, who, values, signature)
        _bind(child.level, scopes, who, values, signature)
        if child.junction_policy is not None:
            _grant(child.junction_policy, who, values, signature)
    nodes = scopes.get(level.path)
    if nodes:
        built = plans.walked(reflection.schema(), level.table, tuple(nodes))
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
    source = level.source()
    for child in _joinable(level, policy):
        child.joined = True
        relationship, table = child.relationship, child.level.table
        pairs = zip(relationship.parent_columns, relationship.child_columns, strict=True)
        on = [level.table.c[parent] == table.c[key] for parent, key in pairs]
        source = source.outerjoin(table, sa.and_(*on, *present(child.level.where)))
        columns += [table.c[relationship.child_columns[0]], *map(child.level.column, child.level.needed())]
    rows = sa.select(*(column.label(f"c{i}") for i, column in enumerate(columns))).select_from(source)
    count = sa.select(sa.func.count()).select_from(level.table)
    if level.where is not None:
        rows, count = rows.where(level.where), count.where(level.where)
    if level.aggregated:  # through to-one spreads (spreads.py): grouped by the other columns' labels
        summed = {item_key(item) for item in level.selected() if item.aggregate}
        groups = [sa.literal_column(f"c{i}") for i, name in enumerate(level.needed()) if name not in summed]
        rows = rows.group_by(*groups)
        count = sa.select(sa.func.count()).select_from(rows.subquery("groups"))
        rows = rows.order_by(*(level.order or groups))
    else:
        rows = rows.order_by(*level.order)
    if offset:
        rows = rows.offset(sa.bindparam("offset", type_=sa.Integer, required=True))
    if limit is not None:
        rows = rows.limit(sa.bindparam("limit", type_=sa.Integer, required=True))
    pairs = [(s, statements.prepare(s, db.engine, named=False)) for s in (rows, count)]
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
        and not child.level.aggregated
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


def _run(pairs, values):
    """The rows (tuples) of each (statement, Prepared or None) of `pairs` with `values`: all
    straight on the DBAPI when all are prepared, else through SQLAlchemy (an `in` filter's list)."""
    if all(prepared is not None for _, prepared in pairs):
        return statements.prepared(values, *(prepared for _, prepared in pairs))
    connection = db.session.connection()
    return [[tuple(row) for row in connection.execute(statement, values)] for statement, _ in pairs]


def _bucket(count):
    """The number of keys a query is prepared for: `count` rounded up to a power of two (the keys
    padded with the last one), so that a few statements serve every number of parents."""
    return min(reads.KEY_CHUNK, 1 << (count - 1).bit_length())


class _Prepared:
    """The embeds' rows by a Plan's statements, with one request's values; `plain` until a shaped
    value is other than text, an integer or null (shaping.shape)."""

    def __init__(self, values):
        self.values = values
        self.plain = True

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

    plain = True  # set on the instance by shaping.shape; a write's rows are encoded as any are

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
        level.where = all_of(where, chunk)
        index = [level.needed().index(column) for column in columns]
        rows = _fetch_top(level)
        for row, shaped in zip(rows, shape(level, rows, _Session()), strict=True):
            found[tuple(row[i] for i in index)] = shaped
    return [found[key] for key in keys if key in found]


def _fetch_top(level):
    columns = [level.column(name) for name in level.needed()]
    statement = sa.select(*(c.label(f"c{i}") for i, c in enumerate(columns))).select_from(level.source())
    if level.where is not None:
        statement = statement.where(level.where)
    statement = statement.order_by(*level.order)
    return [tuple(row) for row in reads.execute(statement).all()]
