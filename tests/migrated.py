"""The service's tables as its migrations leave them, laid into a test's database in one go.

Each test has a database of its own, and migrating each one (every migration since 0001, some twenty
tables and the ALTERs since) was most of what a test cost. So each test process migrates one
database per backend, once, takes down what the migrations left there (each table's CREATE statement
as the database gives it back, SQLite's indexes, and the rows), and lays that into a test's empty
database before the service starts on it: the service then finds its migrations applied, as it does
on every start but the first. Tests of the migrations themselves and of a first start are marked
`fresh_database` and get an empty database (tests/conftest.py).
"""

import sqlite3

import pymysql
from sqlalchemy.engine import make_url


class Migrated:
    """CREATE statements in an order that replays, and each table's rows as (columns, rows)."""

    def __init__(self, backend, statements, rows):
        self.backend, self.statements, self.rows = backend, statements, rows

    def __eq__(self, other):
        return (self.backend, self.statements, self.rows) == (other.backend, other.statements, other.rows)

    @classmethod
    def take(cls, url):
        """What the database at `url` holds: tables (and on SQLite their indexes) and rows only; a
        view, trigger or routine, which this does not copy, is an error rather than left out."""
        url = make_url(url)
        if url.get_backend_name() == "sqlite":
            return cls._take_sqlite(url.database)
        return cls._take_mysql(url)

    def lay_into(self, url):
        """Create the tables in the database at `url` and fill them; False, doing nothing, when it
        already holds one of them (the service migrated it already, or the test made its own)."""
        url = make_url(url)
        if url.get_backend_name() == "sqlite":
            return self._lay_sqlite(url.database)
        return self._lay_mysql(url)

    @property
    def tables(self):
        return set(self.rows) - {"sqlite_sequence"}

    def _inserts(self, quote, mark):
        """(INSERT statement, its rows) for each table with rows, names quoted with `quote` and
        values marked with `mark` (the driver's paramstyle)."""
        for table, (columns, rows) in self.rows.items():
            if rows:
                names = ", ".join(f"{quote}{column}{quote}" for column in columns)
                marks = ", ".join(mark for _ in columns)
                yield f"INSERT INTO {quote}{table}{quote} ({names}) VALUES ({marks})", rows

    @classmethod
    def _take_sqlite(cls, path):
        connection = sqlite3.connect(path)
        try:
            objects = connection.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                "ORDER BY type <> 'table', rowid"
            ).fetchall()
            others = [(kind, name) for kind, name, _ in objects if kind not in ("table", "index")]
            if others:
                raise RuntimeError(f"tests/migrated.py copies tables and indexes, not {others}")
            statements = [sql for _, name, sql in objects if not name.startswith("sqlite_")]
            tables = [name for kind, name, _ in objects if kind == "table"]  # sqlite_sequence too
            rows = {}
            for table in tables:
                cursor = connection.execute(f'SELECT * FROM "{table}"')
                rows[table] = ([column[0] for column in cursor.description], cursor.fetchall())
        finally:
            connection.close()
        return cls("sqlite", statements, rows)

    def _lay_sqlite(self, path):
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            present = {name for (name,) in connection.execute("SELECT name FROM sqlite_master")}
            if present & self.tables:
                return False
            connection.execute("BEGIN")
            for statement in self.statements:
                connection.execute(statement)
            for insert, rows in self._inserts('"', "?"):
                connection.executemany(insert, rows)
            connection.execute("COMMIT")
        finally:
            connection.close()
        return True

    @classmethod
    def _take_mysql(cls, url):
        connection = _connect(url)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT table_name, table_type FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() ORDER BY table_name"
                )
                found = cursor.fetchall()
                others = [(kind, name) for name, kind in found if kind != "BASE TABLE"]
                for kind, table, column in (
                    ("TRIGGER", "triggers", "trigger"),
                    ("ROUTINE", "routines", "routine"),
                    ("EVENT", "events", "event"),
                ):
                    cursor.execute(
                        f"SELECT {column}_name FROM information_schema.{table} "
                        f"WHERE {column}_schema = DATABASE()"
                    )
                    others += [(kind, name) for (name,) in cursor.fetchall()]
                if others:
                    raise RuntimeError(f"tests/migrated.py copies tables, not {others}")
                statements, rows = [], {}
                for table, _ in found:
                    cursor.execute(f"SHOW CREATE TABLE `{table}`")
                    statements.append(cursor.fetchone()[1])
                    cursor.execute(f"SELECT * FROM `{table}`")
                    rows[table] = ([column[0] for column in cursor.description], list(cursor.fetchall()))
        finally:
            connection.close()
        return cls("mysql", statements, rows)

    def _lay_mysql(self, url):
        connection = _connect(url)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
                )
                if {name for (name,) in cursor.fetchall()} & self.tables:
                    return False
                # A table may name another in a FOREIGN KEY before that one is made.
                cursor.execute("SET SESSION foreign_key_checks = 0")
                for statement in self.statements:
                    cursor.execute(statement)
                for insert, rows in self._inserts("`", "%s"):
                    cursor.executemany(insert, rows)
            connection.commit()
        finally:
            connection.close()
        return True


def _connect(url):
    return pymysql.connect(
        host=url.host,
        port=url.port or 3306,
        user=url.username,
        password=url.password or "",
        database=url.database,
        charset="utf8mb4",
        ssl_disabled=url.query.get("ssl_disabled") == "true",
    )
