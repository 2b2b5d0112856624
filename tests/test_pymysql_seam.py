"""The seam to PyMySQL (database/pymysql_seam.py): each private attribute it relies on is still
there, as it was, in the PyMySQL installed (a test that fails names the one that changed); its
results read as PyMySQL's own; a MySQL connection goes back to the pool after a commit without a
ROLLBACK (a round trip of every write request), and with one whenever a transaction may be open;
PyMySQL's default TLS context is made once."""

import inspect
import ssl

import pymysql
import pytest
from pymysql.connections import Connection, MySQLResult
from sqlalchemy.engine import make_url

from database.pymysql_seam import RELIES_ON, BoundedConnection

CLASSES = {"Connection": Connection, "MySQLResult": MySQLResult}
# The parameters of the methods the seam overrides, as it calls them through super().
SIGNATURES = {
    "_create_ssl_ctx": ["self", "sslp"],
    "_read_query_result": ["self", "unbuffered"],
    "_execute_command": ["self", "command", "sql"],
    "_read_bytes": ["self", "num_bytes"],
    "_force_close": ["self"],
    "_get_descriptions": ["self"],
    "_read_rowdata_packet": ["self"],
    "_check_packet_is_eof": ["self", "packet"],
    "read": ["self"],
}


@pytest.mark.parametrize(
    ("owner", "name"), [(owner, name) for owner, used in RELIES_ON.items() for name in used["methods"]]
)
def test_pymysql_still_has_each_method_the_seam_uses(owner, name):
    method = getattr(CLASSES[owner], name, None)
    assert callable(method), f"PyMySQL's {owner}.{name} is gone: database/pymysql_seam.py relies on it"
    wanted = SIGNATURES[name]
    found = list(inspect.signature(method).parameters)
    assert found == wanted, f"PyMySQL's {owner}.{name} now takes {found}, not {wanted}"


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_pymysql_still_sets_each_attribute_the_seam_uses(database_url):
    url = make_url(database_url)
    options = {"host": url.host, "port": url.port, "user": url.username, "database": url.database}
    connection = pymysql.connect(**options)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        found = {"Connection": connection, "MySQLResult": connection._result}
        for owner, used in RELIES_ON.items():
            for name in used["attributes"]:
                assert hasattr(found[owner], name), (
                    f"PyMySQL's {owner} has no {name} now: the seam relies on it"
                )
    finally:
        connection.close()


def rollbacks(connection):
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Com_rollback'")
        return int(cursor.fetchone()[1])


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_a_rollback_is_skipped_only_right_after_a_commit_or_a_rollback(database_url):
    url = make_url(database_url)
    options = {"host": url.host, "port": url.port, "user": url.username, "database": url.database}
    connection, other = BoundedConnection(**options), pymysql.connect(**options)
    try:
        cursor, waiting = connection.cursor(), other.cursor()
        cursor.execute("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
        waiting.execute("SET SESSION innodb_lock_wait_timeout = 1")
        cursor.execute("INSERT INTO t VALUES (1)")
        connection.commit()
        counted = rollbacks(connection)
        cursor.execute("INSERT INTO t VALUES (2)")
        connection.commit()
        connection.rollback()  # what the pool does when the connection goes back
        connection.rollback()
        assert rollbacks(connection) == counted  # nothing was open: no round trip

        cursor.execute("INSERT INTO t VALUES (3)")  # an open transaction is rolled back
        connection.rollback()
        assert rollbacks(connection) == counted + 1
        cursor.execute("SELECT id FROM t ORDER BY id")
        assert cursor.fetchall() == ((1,), (2,))
        connection.commit()

        with pytest.raises(pymysql.err.IntegrityError):  # a failed statement after a commit ...
            cursor.execute("UPDATE t SET id = 2 WHERE id = 1")
        with pytest.raises(pymysql.err.OperationalError) as waited:  # ... holds its lock until rolled back
            waiting.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")
        assert waited.value.args[0] == 1205
        connection.rollback()
        assert rollbacks(connection) == counted + 2
        waiting.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")  # the lock was released
        other.rollback()
    finally:
        connection.close()
        other.close()


COLUMNS = (
    "id INT PRIMARY KEY, tiny TINYINT, big BIGINT UNSIGNED, exact DECIMAL(12,3), single FLOAT, "
    "dbl DOUBLE, flags BIT(10), day DATE, moment DATETIME(6), stamp TIMESTAMP NULL, span TIME(3), "
    "yr YEAR, code CHAR(3), name VARCHAR(400), body MEDIUMTEXT, raw BLOB, bin VARBINARY(20), "
    "doc JSON, mood ENUM('glad','sad'), tags SET('a','b','c')"
)
VALUES = [
    "1, -128, 18446744073709551615, -123456789.125, 1.5, 0.1, b'1010101010', '2024-02-29', "
    "'2024-02-29 23:59:59.123456', '2024-01-01 00:00:01', '-838:59:59.999', 2155, 'abc', "
    "REPEAT('é', 400), REPEAT('x', 70000), X'00FF10', X'DEADBEEF', '{\"a\": [1, \"ü\"]}', 'sad', 'a,c'",
    ", ".join(["2"] + ["NULL"] * 19),
    "3, 0, 0, 0, 0, 0, b'0', '1000-01-01', '1000-01-01 00:00:00', NULL, '00:00:00', 1901, '', '', '', '', "
    "'', 'null', 'glad', ''",
    "4, 127, 250, 1, -3.25, 1e300, b'1', '9999-12-31', '9999-12-31 23:59:59.999999', NULL, '12:00:00.5', "
    "2024, 'xyz', REPEAT('y', 251), REPEAT('z', 65536), REPEAT(X'01', 300), X'', '[]', NULL, 'b'",
]


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_results_read_as_pymysql_reads_them(database_url):
    """Every type's values, NULLs, and the lengths that take 1, 3 and 4 bytes to say: the rows and
    descriptions a BoundedConnection reads (database.pymysql_seam), the second time from the column
    definitions it kept, are PyMySQL's own, and so is an error that comes after some of the rows."""
    url = make_url(database_url)
    options = {"host": url.host, "port": url.port, "user": url.username, "database": url.database,
               "charset": "utf8mb4"}  # fmt: skip
    ours, theirs = BoundedConnection(**options), pymysql.connect(**options)
    try:
        cursor, plain = ours.cursor(), theirs.cursor()
        cursor.execute(f"CREATE TABLE every_type ({COLUMNS}) ENGINE=InnoDB")
        for values in VALUES:
            cursor.execute(f"INSERT INTO every_type VALUES ({values})")
        ours.commit()
        queries = [
            "SELECT * FROM every_type ORDER BY id",
            "SELECT id, name AS other, 1 + 1, NULL, 'é' FROM every_type WHERE id > 1 ORDER BY id DESC",
            "SELECT * FROM every_type WHERE id = 99",  # no rows
            # More rows than the read buffer holds: read in place, then a row that is not all there
            "SELECT seq, REPEAT('x', seq % 300), seq / 7, IF(seq % 5, NULL, seq * 1.5e0) FROM seq_1_to_3000",
        ]
        for query in queries * 2:  # the second time, from the column definitions kept
            plain.execute(query)
            cursor.execute(query)
            assert cursor.fetchall() == plain.fetchall()
            assert cursor.description == plain.description
        assert ours.known_columns
        with pytest.raises(pymysql.err.OperationalError) as refused:  # errors are PyMySQL's
            cursor.execute("SELECT no_such_column FROM every_type")
        assert refused.value.args[0] == 1054
        failing = "SELECT seq, IF(seq = 900, (SELECT 1 UNION SELECT 2), seq) FROM seq_1_to_1000"
        with pytest.raises(pymysql.err.OperationalError) as refused:  # after 899 rows were sent
            cursor.execute(failing)
        assert refused.value.args[0] == 1242
        cursor.execute("SELECT COUNT(*) FROM every_type")
        assert cursor.fetchall() == ((4,),)
        theirs.rollback()  # its reads' transaction would hold the table
        cursor.execute("DROP TABLE every_type")
    finally:
        ours.close()
        theirs.close()


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"])
def test_connections_in_pymysqls_default_tls_share_one_context(database_url):
    """PyMySQL's default (TLS when the server offers it, no certificate checked) built a context per
    connection, loading the system's CA certificates for nothing; now one context serves them all,
    still the default's: nothing verified, TLS not required. Explicit TLS options keep their own."""
    url = make_url(database_url)
    options = {"host": url.host, "port": url.port, "user": url.username, "database": url.database}
    first, second = BoundedConnection(**options), BoundedConnection(**options)
    try:
        assert first.ctx is second.ctx
        assert first.ssl and not first._ssl_required
        assert first.ctx.verify_mode == ssl.CERT_NONE and not first.ctx.check_hostname
        with second.cursor() as cursor:  # this server offers no TLS: the connection goes on without
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        first.close()
        second.close()
    required = BoundedConnection(**options, ssl_verify_cert=True, defer_connect=True)
    assert required._ssl_required and required.ctx is not first.ctx
    assert not BoundedConnection(**options, ssl_disabled=True, defer_connect=True).ssl
