"""Who of the subscribers gets which change, judged for a whole batch of changes at once: each
subscriber's token verified again (one read for all their sessions), its table's select rule and
owner rule on the row, and the row policy run by the database on the row's values with the
subscriber's own parameters, in one statement for every row of a table and every subscriber
(a cross join of the rows and the callers' values). Then each change is encoded once, and each
subscriber's frame made around that text. Run in a thread, in the app's context."""

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from errors import APIError
from extensions import db
from live import access, protocol
from rest import policies, reflection

ROW = "minibase_rt_row"  # the derived tables' own index columns
CALLER = "minibase_rt_caller"
CALLERS = "minibase_rt_callers"  # the derived table of the callers' parameters
CHUNK = 100  # rows, and callers, in one statement: SQLite takes at most 500 SELECTs in a UNION


@dataclass(frozen=True)
class Listener:
    """What the judging needs of a channel, taken on the event loop before it starts."""

    channel: object
    subscriptions: list
    who: object  # its Identity when it joined or last renewed its token
    token: str | None
    vsn: str
    topic: str
    join_ref: str | None


def judge(changes, listeners):
    """([(channel, frame)] in change order, [(channel, why)]): the postgres_changes frame of each
    change for each listener whose filter matches and who may select that row now; and the
    listeners whose token no longer holds (expired, logged out, its user banned)."""
    verdicts = access.verify_all({listener.token for listener in listeners if listener.token})
    dead, living = [], []
    for listener in listeners:
        who = verdicts.get(listener.token, listener.who)  # no token (or an opaque key): the socket's role
        if isinstance(who, str):
            dead.append((listener.channel, who))
        else:
            living.append((listener, who))
    wanted = []  # (change, table, [(listener, ids, grant, values)])
    grants = {}  # (table, role, user, session) -> (its Grant of select, or None; its policy's values)
    for change in changes:
        policy = policies.policies().get(change.table)
        table = reflection.reflected_or_none(change.table) if policy is not None and policy.realtime else None
        if table is None:
            continue
        row = _row(change)
        owner = None if policy.owner_column is None else row.get(policy.owner_column)
        found = []
        for listener, who in living:
            ids = [s.id for s in listener.subscriptions if s.matches(change.table, change.operation, row)]
            if not ids:
                continue
            key = (change.table, who.role, who.user_id, who.session_id)
            if key not in grants:
                grants[key] = _grant(policy, who)
            grant, values = grants[key]
            if grant is None or policy.owner_column is not None and not grant.owns(owner):
                continue
            found.append((listener, ids, grant, values))
        if found:
            wanted.append((change, table, found))
    admitted = _admitted(wanted)
    frames = []
    for change, table, found in wanted:
        data = None
        for listener, ids, grant, values in found:
            if grant.using is not None and (change.id, values) not in admitted:
                continue
            data = data or json.dumps(payload(change, table), separators=(",", ":"))
            text = f'{{"ids":[{",".join(map(str, ids))}],"data":{data}}}'
            message = protocol.Message(listener.topic, "postgres_changes", protocol.Encoded(text), None,
                                       listener.join_ref)  # fmt: skip
            frames.append((listener.channel, protocol.encode(message, listener.vsn)))
    return frames, dead


def _row(change):
    """The row a change is judged on: the new one, or for a DELETE the row as it was."""
    return change.old if change.operation == "DELETE" else change.new


def _grant(policy, who):
    """(the Grant of select, or None when refused; the caller's values of the parameters its row
    policy names, or None without one: callers alike are judged once)."""
    try:
        grant = policies.authorize(policy, "select", who)
    except APIError:
        return None, None
    if grant.using is None:
        return grant, None
    return grant, tuple(grant.values.get(name) for name in grant.using.params)


def _admitted(wanted):
    """{(change id, the caller's values)} that the row policy of the change's table admits, asked of
    the database in as few statements as CHUNK allows: every row of a table against every distinct
    set of callers' values."""
    tables = {}  # name -> (RowPolicy, {change id: row}, {values})
    for change, _, found in wanted:
        for _, _, grant, values in found:
            if grant.using is None:
                continue
            using, rows, callers = tables.setdefault(change.table, (grant.using, {}, set()))
            rows[change.id] = _row(change)
            callers.add(values)
    admitted = set()
    with db.engine.connect() as connection:
        for name, (using, rows, callers) in tables.items():
            rows, callers = list(rows.items()), sorted(callers, key=repr)
            for first in range(0, len(rows), CHUNK):
                for start in range(0, len(callers), CHUNK):
                    part = callers[start : start + CHUNK]
                    statement, values = _statement(name, using, rows[first : first + CHUNK], part)
                    for row, caller in connection.execute(statement, values):
                        admitted.add((row, part[caller]))
    return admitted


def _statement(name, using, rows, callers):
    """(SELECT (change id, caller index) of `rows` ([(change id, row)]) crossed with `callers` (tuples
    of values of using.params) where the policy holds, its values): the rows as a derived table named
    as the table (the policy names its columns, qualified or not), the callers' values as another."""
    columns = tuple(dict.fromkeys(column for _, row in rows for column in row))
    values = {}
    for n, (key, row) in enumerate(rows):
        values[f"r{n}_0"] = key
        for m, column in enumerate(columns, 1):
            values[f"r{n}_{m}"] = _bound(row.get(column))
    for n, found in enumerate(callers):
        values[f"c{n}_0"] = n
        for m, value in enumerate(found, 1):
            values[f"c{n}_{m}"] = _bound(value)
    return _sql(db.engine.dialect, name, using, columns, len(rows), len(callers)), values


def _bound(value):
    return json.dumps(value) if isinstance(value, dict | list) else value


@functools.lru_cache(maxsize=64)
def _sql(dialect, name, using, columns, rows, callers):
    """The text of _statement for its shape, which repeats from batch to batch (one row, a hundred
    callers): SQLAlchemy parses a text's parameters each time it is made, a few ms for a thousand.
    Written as text: SQLAlchemy's constructs cost more than the query."""
    quote = dialect.identifier_preparer.quote

    def union(labels, count, prefix):
        """SELECT :p0_0 AS label, … UNION ALL SELECT :p1_0, … of `count` lines."""
        first = ", ".join(f":{prefix}0_{m} AS {label}" for m, label in enumerate(labels))
        rest = (", ".join(f":{prefix}{n}_{m}" for m in range(len(labels))) for n in range(1, count))
        return " UNION ALL ".join(["SELECT " + first, *("SELECT " + line for line in rest)])

    row_table = union([ROW, *(quote(column) for column in columns)], rows, "r")
    caller_table = union([CALLER, *using.params], callers, "c")
    return sa.text(
        f"SELECT {quote(name)}.{ROW}, {CALLERS}.{CALLER} FROM ({row_table}) AS {quote(name)} "
        f"CROSS JOIN ({caller_table}) AS {CALLERS} WHERE ({using.sql_from(CALLERS)})"
    )


TYPES = (
    (sa.Boolean, "bool"),
    (sa.Integer, "int8"),
    (sa.Float, "float8"),
    (sa.Numeric, "numeric"),
    (sa.JSON, "jsonb"),
    (sa.DateTime, "timestamp"),
    (sa.Date, "date"),
    (sa.Time, "time"),
)


def _type(column):
    return next((name for kind, name in TYPES if isinstance(column.type, kind)), "text")


def _value(column, value):
    if isinstance(column.type, sa.Boolean) and isinstance(value, int):
        return bool(value)
    if isinstance(column.type, sa.JSON) and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def payload(change, table):
    """Supabase's postgres_changes data: only the exposed columns; the old row's primary key only."""
    columns = [column for column in table.c]
    data = {
        "schema": "public",
        "table": change.table,
        "commit_timestamp": datetime.fromtimestamp(change.at, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "type": change.operation,
        "columns": [{"name": column.key, "type": _type(column)} for column in columns],
        "errors": None,
    }
    if change.new is not None:
        data["record"] = {c.key: _value(c, change.new[c.key]) for c in columns if c.key in change.new}
    if change.old is not None:
        key = [c for c in reflection.primary_key(table)] or columns[:1]
        data["old_record"] = {c.key: _value(c, change.old[c.key]) for c in key if c.key in change.old}
    return data
