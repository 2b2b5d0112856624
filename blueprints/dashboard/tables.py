"""The dashboard's Tables pages: the exposed tables and their rules, a row browser with the table
API's filters, order and paging, a row form, and the CSV export."""

import csv
import io
import itertools
import json

from flask import Response, request, stream_with_context

from blueprints.dashboard.base import PER_PAGE, bp, done, page, page_number
from dashboard import tables
from encoding import text_value
from errors import APIError, Rest


@bp.get("/tables")
def tables_page():
    return page("tables.html", found=tables.exposed())


def shown(value):
    """A cell as text: JSON for objects and lists, empty for NULL."""
    if value is None:
        return ""
    if isinstance(value, dict | list | bool):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


@bp.get("/tables/<name>")
def table_page(name):
    table = tables.describe(name)
    filter_text, order = request.args.get("filter", "")[:2000], request.args.get("order", "")[:500]
    number = page_number()
    found = tables.page(name, tables.query(filter_text, order), (number - 1) * PER_PAGE, PER_PAGE)
    keys = [{f"key:{column}": row.get(column) for column in table.key} for row in found.rows]
    return page(
        "table.html", table=table, rows=found.rows, keys=keys, total=found.total, number=number,
        last=max(1, -(-found.total // PER_PAGE)), filter_text=filter_text, order=order, shown=shown,
    )  # fmt: skip


@bp.get("/tables/<name>/export.csv")
def export_csv(name):
    """Every row the page's filters select, as the table API's CSV (NULL empty, formulas defused),
    read and sent a page at a time."""
    names = [column[0] for column in tables.describe(name).columns]
    query = tables.query(request.args.get("filter", "")[:2000], request.args.get("order", "")[:500])
    pages = tables.every_row(name, query)
    first = next(pages)  # a refused query is a page of its own, before anything is sent
    tables.exported(name)

    def lines():
        for found in itertools.chain([first], pages):
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            if found is first:
                writer.writerow(first.names or names)
            writer.writerows([text_value(value) for value in row.values()] for row in found.rows)
            yield out.getvalue()

    return Response(
        stream_with_context(lines()),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


def key_from(values):
    return {key.removeprefix("key:"): value for key, value in values.items() if key.startswith("key:")}


@bp.get("/tables/<name>/row")
def row_form(name):
    """The form of a new row, or, given its key (key:COLUMN=VALUE), of an existing one."""
    table = tables.describe(name)
    key = key_from(request.args)
    row = {}
    if key:
        if not table.key:
            raise APIError(400, Rest.BAD_QUERY, f"{name} has no primary key: its rows are not edited here")
        found = tables.page(name, tables.query("&".join(f"{c}=eq.{v}" for c, v in key.items()), ""), 0, 1)
        if not found.rows:
            raise APIError(404, Rest.TABLE_NOT_FOUND, "No such row")
        row = found.rows[0]
    return page("row.html", table=table, row=row, key=key, shown=shown)


@bp.post("/tables/<name>/rows")
def insert_row(name):
    inserted = tables.insert(name, tables.values_from_form(name, request.form, inserting=True))
    table = tables.describe(name)
    if table.key and all(column in inserted for column in table.key):
        key = {f"key:{column}": inserted[column] for column in table.key}
        return done(".row_form", "row-inserted", name=name, **key)
    return done(".table_page", "row-inserted", name=name)


@bp.post("/tables/<name>/row")
def update_row(name):
    key = key_from(request.form)
    tables.update(name, key, tables.values_from_form(name, request.form, inserting=False))
    return done(".row_form", "row-saved", name=name, **{f"key:{c}": v for c, v in key.items()})


@bp.post("/tables/<name>/row/delete")
def delete_row(name):
    if request.form.get("confirm") != "yes":
        raise APIError(400, Rest.BAD_QUERY, "Tick the box to confirm the deletion")
    tables.delete(name, key_from(request.form))
    return done(".table_page", "row-deleted", name=name)
