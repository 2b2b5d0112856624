"""Relationships between exposed tables, as PostgREST finds them: many-to-one (an object or null),
one-to-one (the same, when the key is also unique on the other side), one-to-many (an array) and
many-to-many through a junction table whose primary key (or one unique key) holds a foreign key to
each side; and the one an embed means, or PostgREST's 400 and 300."""

import difflib
from dataclasses import dataclass, replace

from errors import APIError, Rest
from rest import policies, reflection


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
    constraint: str = ""  # the foreign key's name (for many-to-many, the junction's)
    text: str = ""  # as PostgREST's 300 describes it: `fkey using table(col) and table(col)`


def _detail(parent_name, table, relationship):
    """One relationship that fits, as PostgREST's PGRST201 lists it."""
    return {
        "cardinality": relationship.kind,
        "embedding": f"{parent_name} with {table}",
        "relationship": relationship.text,
    }


def constraint_name(table_name, reference):
    """A foreign key's name: its constraint's, or the one PostgreSQL would have given it."""
    return reference.name or _postgres_name(table_name, reference)


def _postgres_name(table_name, reference):
    return f"{table_name}_{'_'.join(reference.columns)}_fkey"


def key_names(table_name, reference):
    """What names a foreign key: its constraint's name, and the one PostgreSQL gives it
    (`posts_author_id_fkey`), which an app made on Supabase names whatever the database."""
    return {name for name in (reference.name, _postgres_name(table_name, reference)) if name}


def by_constraint(parent_name, parent, item):
    """`capital_country_id_fkey(*)`: an embed named by a foreign key's constraint (that is no listed
    table's name), the parent's own or one that points to the parent, is an embed of the table
    at its other end through that key, under the constraint's name. The item for that table."""
    if item.table in policies.policies():
        return item
    for reference in reflection.references(parent):
        if item.table in key_names(parent_name, reference):
            return replace(item, table=reference.target, hint=item.hint or item.table)
    for name in policies.policies():
        table = reflection.reflected_or_none(name)
        for reference in reflection.references(table) if table is not None else ():
            if reference.target == parent_name and item.table in key_names(name, reference):
                return replace(item, table=name, hint=item.hint or item.table)
    return item


def by_column(parent, item):
    """`author_id(*)`: an embed named by a foreign key column of the parent (that is no listed
    table's name) is an embed of the table the key points to, through that key. The item for that
    table, and the column (None for an embed named by its table)."""
    if item.table in policies.policies() or item.table not in parent.c:
        return item, None
    for reference in reflection.references(parent):
        if reference.columns == (item.table,):
            return replace(item, table=reference.target, hint=item.hint or item.table), item.table
    return item, None


def find_relationship(parent_name, parent, item, target, column=None):
    """The one relationship `item` names between the parent table and item.table: a 400 when there
    is none (or the table does not exist for the API), a 300 when several fit and no hint picks one.
    A table that references itself has one key and two directions; PostgREST's convention picks
    one: named by the key's column (`parent_id(*)`), the row it points to; named by the table,
    with or without a hint (`children:items!parent_id(*)`), the rows that point to this one."""
    found = [] if target is None else candidates(parent_name, parent, item.table, target)
    by_name = any(item.hint in r.names - {*r.parent_columns, *r.child_columns} for r in found)
    if parent_name == item.table and not by_name:  # a constraint's name means both directions: a 300
        if column is not None:
            found = [r for r in found if r.kind == "many-to-one" and r.parent_columns == (column,)]
        else:
            found = [r for r in found if r.kind != "many-to-one"]
    if item.hint is not None:
        found = [r for r in found if item.hint in r.names]
    if not found:
        hinted = f"' using the hint '{item.hint}" if item.hint else ""
        raise APIError(
            400,
            Rest.NO_RELATIONSHIP,
            f"Could not find a relationship between '{parent_name}' and '{item.table}' in the schema cache",
            hint=_nearest(parent_name, parent, item.table),
            details=f"Searched for a foreign key relationship between '{parent_name}' and '{item.table}"
            f"{hinted}' in the schema 'public', but no matches were found.",
        )
    if len(found) > 1:
        found.sort(key=lambda r: (r.constraint, r.text))  # the same order on every database
        choices = ", ".join(f"'{r.label}'" for r in found)
        raise APIError(
            300,
            Rest.AMBIGUOUS_RELATIONSHIP,
            f"Could not embed because more than one relationship was found for '{parent_name}' and "
            f"'{item.table}'",
            hint=f"Try changing '{item.table}' to one of the following: {choices}. Find the desired "
            "relationship in the 'details' key.",
            details=[_detail(parent_name, item.table, r) for r in found],
        )
    return found[0]


def _nearest(parent_name, parent, name):
    """PostgREST's hint for an embed without a relationship: the nearest name among the tables the
    parent relates to, unless `name` is one of them (then the hint, not the table, is wrong)."""
    related = {reference.target for reference in reflection.references(parent)}
    for other in policies.policies():
        table = reflection.reflected_or_none(other)
        if table is not None and any(r.target == parent_name for r in reflection.references(table)):
            related.add(other)
    if name in related or len(name) > 100:
        return None
    matches = difflib.get_close_matches(name, sorted(related), n=1)
    return f"Perhaps you meant '{matches[0]}' instead of '{name}'." if matches else None


def candidates(parent_name, parent, target_name, target):
    """Every relationship between the two tables: the parent's keys to the target, the target's keys
    to the parent, and junctions between them."""
    found = []
    for reference in reflection.references(parent):
        if reference.target == target_name and all(c in target.c for c in reference.target_columns):
            constraint = constraint_name(parent_name, reference)
            found.append(
                Relationship(
                    target_name,
                    False,
                    reference.columns,
                    reference.target_columns,
                    names=_names(reference, key_names(parent_name, reference)),
                    label=f"{target_name}!{constraint}",
                    constraint=constraint,
                    text=_text(
                        constraint, parent_name, reference.columns, target_name, reference.target_columns
                    ),
                )
            )
    for reference in reflection.references(target):
        if reference.target == parent_name and all(c in parent.c for c in reference.target_columns):
            unique = frozenset(reference.columns) in reflection.unique_sets(target)
            constraint = constraint_name(target_name, reference)
            found.append(
                Relationship(
                    target_name,
                    not unique,
                    reference.target_columns,
                    reference.columns,
                    names=_names(reference, key_names(target_name, reference)),
                    label=f"{target_name}!{constraint}",
                    kind="one-to-one" if unique else "one-to-many",
                    constraint=constraint,
                    text=_text(
                        constraint, parent_name, reference.target_columns, target_name, reference.columns
                    ),
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
                ends = [constraint_name(name, r) for r in (left, right)]
                found.append(
                    Relationship(
                        target_name,
                        True,
                        left.target_columns,
                        left.columns,
                        name,
                        right.columns,
                        right.target_columns,
                        frozenset({name} | key_names(name, left) | key_names(name, right)),
                        f"{target_name}!{name}",
                        "many-to-many",
                        name,
                        _text(name, ends[0], left.columns, ends[1], right.columns),
                    )
                )
    return found


def _names(reference, keys):
    return frozenset({*reference.columns, *keys})


def _text(name, one, columns, other, other_columns):
    return f"{name} using {one}({', '.join(columns)}) and {other}({', '.join(other_columns)})"
