"""The query package: a PostgREST query string into SQL, in three stages, each pure (no Flask, no
I/O, no database connection) and tested on its own, as PostgREST's ApiRequest -> Plan -> Query.

Request (syntax only):
  params.py    the query string whole -> Query
  filters.py   filter pairs (`col=op.value`, `col.op=value`, `or=(...)`) -> the filter tree
  select.py    select= -> SelectItem and EmbedItem
  fields.py    a column name, perhaps "quoted", and its JSON path
  patterns.py  LIKE patterns and match regular expressions, checked
  tree.py      the typed request: nodes, items, FilterError
Plan:
  resolve.py   names meet the reflected table: select= and order= items, fields
SQL:
  sql.py       the filter tree -> a SQLAlchemy expression, its parameters and its plan's shape; ORDER BY
  operators.py the filter operators: each value checked and converted, each expression
  dialects.py  what differs between SQLite and MySQL/MariaDB

Embedding (which relationship an embed means, who may read it) needs policies and the schema:
it is rest/embeds/, which plans with this package. Every value reaches SQL as a bound parameter,
converted to its column's type by values.py.
"""
