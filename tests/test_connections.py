"""A MySQL connection goes back to the pool after a commit without a ROLLBACK (a round trip of
every write request), and with one whenever a transaction may be open."""

import pymysql
import pytest
from sqlalchemy.engine import make_url

from database.connections import BoundedConnection


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
