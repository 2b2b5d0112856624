"""A MySQL/MariaDB database into an archive and back, written by minibase over PyMySQL.

The dump is one REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT: every table's rows (the users
table and any other app's included) as one moment saw them, and in the same transaction the rows
that name storage keys, so the archive's objects are exactly the ones its rows name. Values travel
as the server's own text (no conversion to Python and back: DECIMALs, DATETIMEs and doubles keep
every digit the server gave, as mysqldump keeps them) and binary columns as bytes. The file
(database.jsonl) is one JSON object a line: each table's CREATE, its rows as INSERTs of about
BATCH_BYTES, then views, routines and triggers (made after the rows, so that no trigger fires on a
restored row), each with its DEFINER left out (the restoring account becomes it).

A restore drops what the target holds (it was checked to be empty, or --force was given), makes the
tables, inserts every row in one transaction, then makes the views, routines and triggers. DDL
commits by itself on MySQL: when anything fails, the rows are rolled back and everything made is
dropped, so the target is left empty, never half-restored. InnoDB tables only are snapshotted
consistently (as with mysqldump --single-transaction)."""

import json
import re

import pymysql
import pymysql.converters
import sqlalchemy as sa
from pymysql.cursors import SSCursor

from database import transactions

BATCH_BYTES = 1024 * 1024  # an INSERT's size at most: well under max_allowed_packet (16 MB by default)
SECONDS = 3600  # a read or write on the dump's connection: a large table's rows, a long COMMIT
DEFINER = re.compile(r"\s*DEFINER\s*=\s*(`(?:[^`]|``)*`|'[^']*'|\S+)@(`(?:[^`]|``)*`|'[^']*'|\S+)", re.I)
# PyMySQL's encoders (Python values into SQL literals) without its decoders: values read stay text.
ENCODERS = {
    kind: encode for kind, encode in pymysql.converters.conversions.items() if not isinstance(kind, int)
}
RESTORE_MODE = "NO_AUTO_VALUE_ON_ZERO"  # a row whose AUTO_INCREMENT column is 0 keeps its 0


def connect(url):
    """A connection of its own to the database at `url` (as SQLAlchemy would make it: TLS options
    included), its values as the server's text, no time limit on its statements."""
    params = sa.create_engine(url).dialect.create_connect_args(sa.engine.make_url(url))[1]
    params.update(
        charset="utf8mb4", conv=ENCODERS, read_timeout=SECONDS, write_timeout=SECONDS, autocommit=False
    )
    params.setdefault("connect_timeout", 10)
    connection = pymysql.connect(**params)
    with connection.cursor() as cursor:
        version = connection.get_server_info().lower()
        limit = "max_statement_time = 0" if "mariadb" in version else "max_execution_time = 0"
        cursor.execute(f"SET SESSION {limit}, time_zone = '+00:00'")
    return connection


def quote(name):
    return "`" + name.replace("`", "``") + "`"


def without_definer(statement):
    return DEFINER.sub("", statement, count=1)


def snapshot(url, into, secure, hold=False):
    """Dump the database at `url` into the file `into`: (migration, {(area, key): size or None}).
    The keys are read first, and `secure(keys)` fetches their bytes while the snapshot is fresh;
    when it reports some gone (replaced since), None, and nothing is dumped. With `hold`, another
    connection holds the storage rows (share locks) from before the snapshot until their bytes are
    secured: an upload that would replace or remove one waits that long, and none is gone."""
    connection = connect(url)
    holder = connect(url) if hold else None
    try:
        if holder is not None and not _held(holder):
            return None
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cursor.execute("SHOW FULL TABLES")
            found = cursor.fetchall()
            tables = sorted(name for name, kind in found if kind == "BASE TABLE")
            views = sorted(name for name, kind in found if kind == "VIEW")
            keys = _stored_keys(connection, tables)
            gone = secure(keys)
            if holder is not None:
                holder.rollback()  # the bytes are secured: the uploads waiting go on
            if gone:
                return None
            with open(into, "w", encoding="utf-8") as out:
                for table in tables:
                    cursor.execute(f"SHOW CREATE TABLE {quote(table)}")
                    _write(out, "table", table, cursor.fetchone()[1])
                    _dump_rows(connection, cursor, out, table)
                for view in views:
                    cursor.execute(f"SHOW CREATE VIEW {quote(view)}")
                    _write(out, "view", view, without_definer(cursor.fetchone()[1]))
                _dump_routines(cursor, out)
                _dump_triggers(cursor, out)
            return _migration(cursor, tables), keys
    finally:
        for each in (holder, connection):
            if each is not None:
                each.rollback()
                each.close()


STORAGE_TABLES = ("minibase_storage_objects", "minibase_storage_uploads")


def _held(holder):
    """Share-lock every row of the storage tables in `holder`'s transaction; False when a lock
    wait timed out or was a deadlock's victim (the snapshot is then taken again)."""
    try:
        with holder.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION")
            cursor.execute("SHOW TABLES")
            present = {name for (name,) in cursor.fetchall()}
            for table in STORAGE_TABLES:
                if table in present:
                    # The rows themselves (the primary key), which a replacing upload's UPDATE must
                    # lock: a count over another index locked only that index, and did not hold it.
                    primary = f"{quote(table)} FORCE INDEX (PRIMARY)"
                    cursor.execute(f"SELECT COUNT(*) FROM {primary} LOCK IN SHARE MODE")
                    cursor.fetchall()
    except pymysql.err.OperationalError as exc:
        if exc.args[0] in (1205, 1213):  # ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK
            holder.rollback()
            return False
        raise
    return True


def _write(out, kind, name, sql, sql_mode=None):
    entry = {"kind": kind, "name": name, "sql": sql}
    if sql_mode is not None:
        entry["sql_mode"] = sql_mode
    out.write(json.dumps(entry, ensure_ascii=False) + "\n")


def _dump_rows(connection, cursor, out, table):
    cursor.execute(
        "SELECT column_name, data_type, extra FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    # Generated columns are computed again by the server; they cannot be inserted.
    columns = [(name, kind.lower()) for name, kind, extra in cursor.fetchall() if not _generated(extra or "")]
    names = ", ".join(quote(name) for name, _ in columns)
    head = f"INSERT INTO {quote(table)} ({names}) VALUES "
    # The server writes each row as the literals of an INSERT: PyMySQL then reads one text column
    # a row, where reading every value and quoting it in Python took four times mariadb-dump's time.
    literal = ", ',', ".join(_literal(quote(name), kind) for name, kind in columns)
    rows = connection.cursor(SSCursor)
    try:
        rows.execute(f"SELECT CONCAT('(', {literal}, ')') FROM {quote(table)}")
        batch, size = [], 0
        while chunk := rows.fetchmany(1000):
            for (values,) in chunk:
                if batch and size + len(values) > BATCH_BYTES:
                    _write(out, "rows", table, head + ",".join(batch))
                    batch, size = [], 0
                batch.append(values)
                size += len(values) + 1
        if batch:
            _write(out, "rows", table, head + ",".join(batch))
    finally:
        rows.close()


BINARY_TYPES = frozenset(
    {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point", "linestring",
     "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}
)  # fmt: skip


def _literal(column, kind):
    """SQL that makes the literal of `column`'s value: bytes as hex (X'…', so the dump is text),
    bits as b'…', anything else QUOTE()d as the server prints it (NULL as NULL)."""
    if kind == "bit":
        return f"IF({column} IS NULL, 'NULL', CONCAT('b''', BIN({column}), ''''))"
    if kind in BINARY_TYPES:
        return f"IF({column} IS NULL, 'NULL', CONCAT('X''', HEX({column}), ''''))"
    return f"QUOTE({column})"


def _generated(extra):
    extra = extra.upper()
    return "GENERATED" in extra or extra in ("VIRTUAL", "PERSISTENT", "STORED")


def _dump_routines(cursor, out):
    cursor.execute(
        "SELECT routine_name, routine_type FROM information_schema.routines "
        "WHERE routine_schema = DATABASE() ORDER BY routine_type, routine_name"
    )
    for name, kind in cursor.fetchall():
        cursor.execute(f"SHOW CREATE {kind} {quote(name)}")
        _, sql_mode, create = cursor.fetchone()[:3]
        if create is None:
            raise RuntimeError(f"the account may not read the {kind.lower()} {name}'s definition")
        _write(out, "routine", name, without_definer(create), sql_mode)


def _dump_triggers(cursor, out):
    cursor.execute(
        "SELECT trigger_name FROM information_schema.triggers "
        "WHERE trigger_schema = DATABASE() ORDER BY event_object_table, action_order"
    )
    for (name,) in cursor.fetchall():
        cursor.execute(f"SHOW CREATE TRIGGER {quote(name)}")
        _, sql_mode, create = cursor.fetchone()[:3]
        _write(out, "trigger", name, without_definer(create), sql_mode)


def _migration(cursor, tables):
    if "minibase_alembic_version" not in tables:
        return ""
    cursor.execute("SELECT version_num FROM minibase_alembic_version")
    row = cursor.fetchone()
    return row[0] if row else ""


def _stored_keys(connection, tables):
    keys = {}
    with connection.cursor() as cursor:
        if "minibase_storage_objects" in tables:
            cursor.execute("SELECT storage_key, size FROM minibase_storage_objects ORDER BY updated_at DESC")
            keys.update((("objects", key), int(size)) for key, size in cursor.fetchall())
        if "minibase_storage_uploads" in tables:
            cursor.execute("SELECT parts FROM minibase_storage_uploads")
            for (parts,) in cursor.fetchall():
                keys.update((("uploads", part), None) for part in json.loads(parts or "[]"))
    return keys


def restore(file, url):
    """Replace what the database at `url` holds with the dump `file`; on any failure, leave it empty."""
    connection = connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION foreign_key_checks = 0, sql_mode = '{RESTORE_MODE}'")
            drop_everything(cursor)
            try:
                _replay(connection, cursor, file)
            except BaseException:
                connection.rollback()
                drop_everything(cursor)
                raise
    finally:
        connection.close()


def _replay(connection, cursor, file):
    """The tables made, then every row in one transaction, then views, routines and triggers."""
    for entry in _entries(file, "table"):
        cursor.execute(entry["sql"])
    transactions.on_connection(connection, _insert_rows, cursor, file)
    _make_views(cursor, list(_entries(file, "view")))
    for entry in (*_entries(file, "routine"), *_entries(file, "trigger")):
        cursor.execute("SET SESSION sql_mode = %s", (entry["sql_mode"],))
        cursor.execute(entry["sql"])
    cursor.execute(f"SET SESSION sql_mode = '{RESTORE_MODE}'")


def _insert_rows(connection, cursor, file):
    cursor.execute("START TRANSACTION")
    for entry in _entries(file, "rows"):
        cursor.execute(entry["sql"])


def _entries(file, kind):
    with open(file, encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            if entry["kind"] == kind:
                yield entry


def _make_views(cursor, views):
    """Each view, those that read other views after them: made again until none is left."""
    while views:
        left = []
        for entry in views:
            try:
                cursor.execute(entry["sql"])
            except pymysql.err.ProgrammingError:  # 1146: a view it reads is not made yet
                left.append(entry)
        if len(left) == len(views):
            cursor.execute(left[0]["sql"])  # raises what stops it
        views = left


def drop_everything(cursor):
    """Drop every view, table and routine of the database (triggers go with their tables)."""
    cursor.execute("SHOW FULL TABLES")
    found = cursor.fetchall()
    for name, kind in found:
        if kind == "VIEW":
            cursor.execute(f"DROP VIEW IF EXISTS {quote(name)}")
    for name, kind in found:
        if kind != "VIEW":
            cursor.execute(f"DROP TABLE IF EXISTS {quote(name)}")
    cursor.execute(
        "SELECT routine_name, routine_type FROM information_schema.routines WHERE routine_schema = DATABASE()"
    )
    for name, kind in cursor.fetchall():
        cursor.execute(f"DROP {kind} IF EXISTS {quote(name)}")
