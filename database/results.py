"""PyMySQL's result sets, read with less work per value (database.connections.BoundedConnection
reads its results with `Result`). PyMySQL makes a packet object of each row and reads each value
with three method calls, and parses every column's definition again for every result. Here a row's
bytes are read in one loop, and a connection keeps the column definitions it has met, by their
bytes: a read of one row by key is mostly its column definitions, a 50-row list mostly its rows.
Values, types, descriptions and errors are PyMySQL's own: the same converters, the same exceptions.
Unbuffered results (SSCursor) stay PyMySQL's."""

import errno

from pymysql import converters, err
from pymysql.connections import MAX_PACKET_LEN, TEXT_TYPES, MySQLResult
from pymysql.constants import CR, FIELD_TYPE
from pymysql.protocol import FieldDescriptorPacket, MysqlPacket

# Column definitions a connection keeps; past that many it forgets them all and starts again.
KNOWN_COLUMNS = 1000

NULL, TWO_BYTES, THREE_BYTES = 251, 252, 253  # a length-coded value's first byte (254: eight bytes)
EOF, ERROR = 0xFE, 0xFF  # a packet's first byte


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
