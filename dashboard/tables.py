"""The Tables pages' work: the exposed tables with their rules and row policies as the service holds
them (tables_toml, read once at start), and their rows read, written and exported through the table
API's own service (rest/rows.py) as the service key, which passes every rule and nothing else."""

import json
from dataclasses import dataclass
from urllib.parse import parse_qsl

import sqlalchemy as sa

from auth.identity import Identity
from config import setting
from dashboard.actions import perform, write
from errors import APIError, Rest
from query import params, tree
from rest import policies, reflection, rows
from row_policies import OPERATIONS

SERVICE = Identity("service_role")
RETURN_ROWS = rows.Prefer(returns="representation")


@dataclass(frozen=True)
class Table:
    name: str
    rules: dict  # operation -> rule word
    owner_column: str | None
    row_policies: dict  # operation -> the SQL tables.toml gives
    read_only: bool
    columns: list  # (name, type, nullable, default or None)
    key: list  # the primary key's columns; empty: rows cannot be edited here


def exposed():
    """Every table /rest/v1 exposes, by name."""
    return [describe(name) for name in sorted(policies.policies())]


def describe(name):
    policy = policies.lookup(name)
    table = reflection.reflected(name)
    shown = [column for column in table.c if policy.columns is None or column.key in policy.columns]
    key = [column.key for column in reflection.primary_key(table)]
    if not key and policy.primary_key:
        key = [policy.primary_key]
    return Table(
        name=name,
        rules={operation: policy.rules.get(operation, "service_role") for operation in OPERATIONS},
        owner_column=policy.owner_column,
        row_policies={
            operation: policy.row_policies[operation].written
            for operation in OPERATIONS
            if operation in policy.row_policies
        },
        read_only=policy.read_only,
        columns=[(c.key, str(c.type), c.nullable, c.server_default is not None) for c in shown],
        key=[] if policy.read_only else key,
    )


def query(filter_text, order):
    """The table API's query from the page's fields: filters as its query string says them
    (`price=gt.10&name=ilike.*a*`, either dialect), `order` as its order= does."""
    pairs = parse_qsl(filter_text.strip().lstrip("?"), keep_blank_values=True)
    reserved = [key for key, _ in pairs if key in tree.RESERVED and key not in ("or", "and")]
    if reserved:
        raise APIError(400, Rest.BAD_QUERY, f'"{reserved[0]}" is not a filter: use the fields for it')
    try:
        return params.parse_query(pairs, None, order or None)
    except tree.FilterError as exc:
        raise rows.client_error(exc) from None


def page(name, found_query, offset, limit):
    """One page of rows and the total."""
    return rows.read(
        name, SERVICE, rows.Read(found_query, offset, limit, True, "json", rows.Prefer(count=True))
    )


def every_row(name, found_query):
    """All the rows the query selects, read a page (MAX_ROWS) at a time, for the CSV export."""
    size, offset = setting("MAX_ROWS"), 0
    while True:
        found = rows.read(name, SERVICE, rows.Read(found_query, offset, size, False, "json"))
        yield found
        if len(found.rows) < size:
            return
        offset += size


def values_from_form(name, form, inserting):
    """The column values of a row form: text converted by the table API (a JSON column's text is
    parsed when it is JSON). Inserting, an empty field is left to the column's default; editing, it
    is NULL where the column takes NULL."""
    table = describe(name)
    values = {}
    for column, _type, nullable, _default in table.columns:
        field = f"column:{column}"
        if field not in form:
            continue
        text = form[field]
        if text == "":
            if inserting:
                continue
            values[column] = None if nullable else ""
            continue
        values[column] = _json_or_text(name, column, text)
    return values


def _json_or_text(name, column, text):
    if isinstance(reflection.reflected(name).c[column].type, sa.JSON):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _key_query(name, key):
    pairs = [(column, f"eq.{value}") for column, value in key.items()]
    if not pairs or set(key) != set(describe(name).key):
        raise APIError(400, Rest.BAD_QUERY, "A row is chosen by its whole primary key")
    return params.parse_query(pairs)


def insert(name, values):
    write = rows.Write(params.parse_query([]), RETURN_ROWS, "json", [values])
    return perform("row_inserted", f"table {name}", rows.insert, name, SERVICE, write).rows[0]


def update(name, key, values):
    write = rows.Write(_key_query(name, key), RETURN_ROWS, "json", [values])
    details = {"key": key}
    return perform("row_updated", f"table {name}", rows.update, name, SERVICE, write, details=details)


def delete(name, key):
    write = rows.Write(_key_query(name, key), RETURN_ROWS, "json")
    return perform("row_deleted", f"table {name}", rows.delete, name, SERVICE, write, details={"key": key})


def exported(name):
    """An entry for a CSV export: who took which table's rows."""
    perform("rows_exported", f"table {name}", write, lambda: None)
