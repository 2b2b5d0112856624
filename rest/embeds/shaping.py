"""Shaping: a Level's rows (tuples) into JSON-ready objects, each embed's rows attached to the
parents they belong to: an object or null, an array, a count, or spread into the parent."""

import functools
import operator
from dataclasses import dataclass

from encoding import json_columns, row_shape
from query.tree import SelectItem


def item_key(item):
    """A select item's name among a level's fetched columns: its column, or for a computed item a
    name no column can have."""
    return item.column if item.sql is None else f"\x00{item.alias}"


def _key(positions):
    """A row's key at `positions`: the value itself for one column, else a tuple."""
    return operator.itemgetter(*positions)


@dataclass(frozen=True)
class Layout:
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
    rows of each embed fetched by `source` (_Prepared or _Session) for all of them at once. Once
    done, `source.plain` says whether every value in them is text, an integer or null."""
    layout = level.layout
    values, plain = json_columns(layout.items, found)
    source.plain = source.plain and plain
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
        empty = child.empty()
        for one, key in zip(objects, keys, strict=True):
            one[alias] = grouped.get(key) or empty
    else:
        for one, key in zip(objects, keys, strict=True):
            one[alias] = grouped.get(key)
