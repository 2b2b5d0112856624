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
(reading.py's `_joinable` says when that reads the same rows).

  relationships.py  which relationship an embed means
  planner.py        the select tree against the tables: a Level tree (levels.py)
  levels.py         a Level per table, a Child per embed, and the query of its rows
  reading.py        the queries prepared once per shape of request, and run
  shaping.py        the rows into objects, each embed's attached to its parents
"""

from rest.embeds.planner import Planner, plan
from rest.embeds.reading import read, read_keys

__all__ = ["Planner", "plan", "read", "read_keys"]
