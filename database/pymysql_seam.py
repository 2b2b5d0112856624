"""The seam to PyMySQL: everything minibase takes from it beyond the DB-API, here and nowhere else,
each private attribute named in RELIES_ON (tests/test_pymysql_seam.py fails, naming it, when a new
PyMySQL changes one; requirements.txt pins the version tested).

- BoundedConnection: PyMySQL's connection, its timeouts cut to what the request has left to wait,
  its default TLS context made once, its results read by Result, and the ROLLBACK of a connection
  that has nothing to undo skipped.
- Result: PyMySQL's result sets, read with less work per value. PyMySQL makes a packet object of
  each row and reads each value with three method calls, and parses every column's definition again
  for every result. Here a row's bytes are read in one loop, and a connection keeps the column
  definitions it has met, by their bytes: a read of one row by key is mostly its column
  definitions, a 50-row list mostly its rows. Values, types, descriptions and errors are PyMySQL's
  own: the same converters, the same exceptions. Unbuffered results (SSCursor) stay PyMySQL's.
- closed_by_the_server: whether an idle connection's socket says the server closed it."""

import errno
import math
import select
import ssl
import time

import pymysql
from pymysql import converters, err
from pymysql.connections import MAX_PACKET_LEN, TEXT_TYPES, MySQLResult
from pymysql.constants import CR, FIELD_TYPE
from pymysql.protocol import FieldDescriptorPacket, MysqlPacket

from database import transactions

# What is used of PyMySQL that it does not document, by the class that has it: methods overridden
# or called, and attributes read or set (those of a connection exist once it is connected).
RELIES_ON = {
    "Connection": {
        "methods": ("_read_bytes", "_force_close", "_create_ssl_ctx", "_read_query_result",
                    "_execute_command"),
        "attributes": ("_rfile", "_next_seq_id", "_sock", "_result", "_read_timeout", "_write_timeout",
                       "connect_timeout", "encoding", "server_status"),
    },
    "MySQLResult": {
        "methods": ("read", "_get_descriptions", "_read_rowdata_packet", "_check_packet_is_eof"),
        "attributes": ("connection", "field_count", "server_status", "affected_rows", "fields",
                       "converters", "description"),
    },
}  # fmt: skip

# Column definitions a connection keeps; past that many it forgets them all and starts again.
KNOWN_COLUMNS = 1000

NULL, TWO_BYTES, THREE_BYTES = 251, 252, 253  # a length-coded value's first byte (254: eight bytes)
EOF, ERROR = 0xFE, 0xFF  # a packet's first byte


# --- the connection


# The shortest a socket timeout is cut to: a timeout of 0 would make the socket non-blocking. Past the
# request's time, what it still sends (the rollback that ends it) fails this fast on a frozen server.
LEAST_WAIT = 0.05


class _CutToTheRequest:
    """A timeout attribute of a PyMySQL connection that reads as the value it was given (None: no
    limit), or what the request has left to wait on the database if less, rounded up to a tenth of
    a second so that a run of statements sets the socket timeout once. PyMySQL reads it for every
    packet, a 50-row result's 58 times: it is worked out inline, without a call."""

    def __set_name__(self, owner, name):
        self.name = "_given" + name

    def __get__(self, connection, owner=None):
        if connection is None:
            return self
        seconds = connection.__dict__[self.name]
        deadline = transactions.deadline()
        if deadline is None:
            return seconds
        left = deadline - time.monotonic()
        if seconds is not None and seconds <= left:
            return seconds
        return max(LEAST_WAIT, math.ceil(left * 10) / 10)

    def __set__(self, connection, seconds):
        connection.__dict__[self.name] = seconds


PREFERRED_TLS = []  # the one context of PyMySQL's default TLS, once made (BoundedConnection)


class BoundedConnection(pymysql.connections.Connection):
    """PyMySQL's connection, whose connect, read and write timeouts (the attributes it reads before
    each connect, read and write) are cut to what the request has left to wait on the database, and
    whose results are read with less work per value (Result)."""

    connect_timeout = _CutToTheRequest()
    _read_timeout = _CutToTheRequest()
    _write_timeout = _CutToTheRequest()

    def __init__(self, *args, **kwargs):
        self.known_columns = {}  # column definitions met, by their bytes (Result)
        super().__init__(*args, **kwargs)

    def _create_ssl_ctx(self, sslp):
        """PyMySQL's TLS context. Its default, TLS when the server offers it and no certificate
        checked ({}), built a new context for every connection, loading the system's CA certificates
        into it for nothing: some 50 ms of CPU a connection. That context is the same every time, so
        one is made and shared (an SSLContext serves any number of connections and threads)."""
        if sslp != {}:
            return super()._create_ssl_ctx(sslp)
        if not PREFERRED_TLS:
            PREFERRED_TLS.append(super()._create_ssl_ctx(sslp))
        return PREFERRED_TLS[0]

    def _read_query_result(self, unbuffered=False):  # PyMySQL's, with Result
        if unbuffered:
            return super()._read_query_result(unbuffered)
        self._result = None
        result = Result(self)
        result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows

    # No command since a COMMIT or ROLLBACK that succeeded, so no transaction is open: the pool's
    # ROLLBACK when a connection goes back after a write committed is then skipped, a round trip
    # of every write request.
    ended = False

    def _execute_command(self, command, sql):  # every command PyMySQL sends goes through here
        self.ended = False
        return super()._execute_command(command, sql)

    def commit(self):
        super().commit()
        self.ended = True

    def rollback(self):
        if not self.ended:
            super().rollback()
            self.ended = True


def closed_by_the_server(dbapi_connection):
    """Whether a PyMySQL connection between commands has something to read: the end of the stream
    of a connection the server closed, or the error it sent before closing it. (A TLS connection's
    socket may hold records of TLS's own: it is not looked at.)"""
    sock = getattr(dbapi_connection, "_sock", None)
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket):
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


# --- its results


class Result(MySQLResult):
    def _get_descriptions(self):
        connection = self.connection
        known = connection.known_columns
        fields, converters_, description = [], [], []
        for _ in range(self.field_count):
            data = _packet(connection)
            column = known.get(data)
            if column is None:
                if data[0] == ERROR:
                    MysqlPacket(data, connection.encoding).raise_for_error()
                if len(known) >= KNOWN_COLUMNS:
                    known.clear()
                column = known[data] = _column(FieldDescriptorPacket(data, connection.encoding), connection)
            fields.append(column[0])
            description.append(column[1])
            converters_.append(column[2])
        end = _packet(connection)
        if end[0] == ERROR:
            MysqlPacket(end, connection.encoding).raise_for_error()
        if not (end[0] == EOF and len(end) < 9):
            raise err.InternalError("Protocol error, expecting EOF")
        self.fields, self.converters, self.description = fields, converters_, tuple(description)

    def _read_rowdata_packet(self):
        connection = self.connection
        columns = self.converters
        rows = []
        while True:
            _buffered_rows(connection, columns, rows)
            data = _packet(connection)  # a row not all in the buffer yet, or the result's end
            first = data[0]
            if first == EOF and len(data) < 9:
                self._check_packet_is_eof(MysqlPacket(data, connection.encoding))
                self.connection = None
                break
            if first == ERROR:  # a row never starts so: an error instead of the rest of the result
                MysqlPacket(data, connection.encoding).raise_for_error()
            rows.append(_row(data, 0, len(data), columns))
        self.affected_rows = len(rows)
        self.rows = tuple(rows)


def _row(data, at, end, columns):
    """The values of the row packet data[at:end], one for each of `columns` ((text encoding,
    converter) pairs)."""
    row = []
    for text, convert in columns:
        if at >= end:  # fewer values than columns: PyMySQL ends the row there too
            break
        size = data[at]
        at += 1
        if size >= NULL:
            if size == NULL:
                row.append(None)
                continue
            width = 2 if size == TWO_BYTES else 3 if size == THREE_BYTES else 8
            size = int.from_bytes(data[at : at + width], "little")
            at += width
        value = data[at : at + size]
        at += size
        if text is not None:
            value = value.decode(text)
        if convert is not None:
            value = convert(value)
        row.append(value)
    return tuple(row)


def _buffered_rows(connection, columns, rows):
    """The rows whose packets the connection's read buffer holds whole, read in place and appended
    to `rows`: a 50-row result mostly arrives at once, and reading it packet by packet was two reads
    of the buffer a row. Stops at anything else (a packet not all there, one of 16 MB or more, the
    end of the result, an error, a sequence number out of turn), which _packet reads."""
    buffer = _peek(connection)
    at, end, number = 0, len(buffer), connection._next_seq_id
    while at + 4 <= end:
        size = buffer[at] | buffer[at + 1] << 8 | buffer[at + 2] << 16
        start = at + 4
        stop = start + size
        if stop > end or size >= MAX_PACKET_LEN or buffer[at + 3] != number or size == 0:
            break
        first = buffer[start]
        if first == ERROR or (first == EOF and size < 9):
            break
        rows.append(_row(buffer, start, stop, columns))
        number = (number + 1) % 256
        at = stop
    if at:
        connection._rfile.read(at)  # what was read in place: it is in the buffer, no wait
        connection._next_seq_id = number


def _peek(connection):
    """What the connection's read buffer holds, read from the socket first when it holds nothing
    (as the next packet would be); a failure is what Connection._read_bytes makes of it."""
    while True:
        try:
            return connection._rfile.peek(4)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            connection._force_close()
            raise err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
            ) from None
        except BaseException:
            connection._force_close()
            raise


def _packet(connection):
    """The next packet's bytes, as Connection._read_packet reads them (the sequence number checked,
    a packet of 16 MB or more joined with the ones that follow), without a packet object. The socket
    keeps the read timeout the result's first packet set (what the request had left then)."""
    read = connection._read_bytes
    parts = []
    while True:
        header = read(4)
        size, number = header[0] | header[1] << 8 | header[2] << 16, header[3]
        if number != connection._next_seq_id:
            connection._force_close()
            if number == 0:  # MariaDB, shutting down, sends an error packet numbered 0
                raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
            raise err.InternalError(
                f"Packet sequence number wrong - got {number} expected {connection._next_seq_id}"
            )
        connection._next_seq_id = (number + 1) % 256
        parts.append(read(size))
        if size < MAX_PACKET_LEN:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _column(field, connection):
    """(field, its description, (its text encoding or None, its converter or None)), as
    MySQLResult._get_descriptions works them out."""
    kind = field.type_code
    if not connection.use_unicode:
        text = None
    elif kind == FIELD_TYPE.JSON:
        text = connection.encoding
    elif kind in TEXT_TYPES:
        text = None if field.charsetnr == 63 else connection.encoding  # 63: binary
    else:
        text = "ascii"
    convert = connection.decoders.get(kind)
    if text == "ascii" and convert in (int, float):
        text = None  # int() and float() read the digits' bytes as they are: no text made first
    return field, field.description(), (text, None if convert is converters.through else convert)
