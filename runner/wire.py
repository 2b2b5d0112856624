"""The messages between the service and a worker process, over one socket: JSON for what is said
(b"J"), raw bytes for bodies (b"B"). Nothing is pickled: a worker runs the operator's code, and what
it sends must not be able to run code in the service."""

import json
import select
import socket
import struct

CONTROL, DATA = b"J", b"B"
CHUNK = 1024 * 1024  # a body is sent in pieces of at most this
MAX_MESSAGE = CHUNK + 64 * 1024  # more than any one message may be: a worker that sends more is broken


LENGTH = struct.Struct("!I")


class Channel:
    """A socket carrying messages, each preceded by its length (what multiprocessing's Connection
    does, without importing multiprocessing into every worker: a third of its start)."""

    def __init__(self, sock):
        self.sock = sock

    @classmethod
    def from_fd(cls, fd):
        return cls(socket.socket(fileno=fd))

    def send_bytes(self, data):
        self.sock.sendall(LENGTH.pack(len(data)) + data)

    def recv_bytes(self, maxlength):
        (length,) = LENGTH.unpack(self._exactly(LENGTH.size))
        if length > maxlength:
            raise OSError(f"a message of {length} bytes, more than {maxlength}")
        return self._exactly(length)

    def _exactly(self, count):
        parts, missing = [], count
        while missing:
            part = self.sock.recv(min(missing, 1 << 20))
            if not part:
                raise EOFError
            parts.append(part)
            missing -= len(part)
        return b"".join(parts)

    def poll(self, timeout):
        """True when something (or the end) can be read within `timeout` seconds."""
        return bool(select.select([self.sock], [], [], max(0.0, timeout))[0])

    def close(self):
        self.sock.close()


def say(conn, **message):
    conn.send_bytes(CONTROL + json.dumps(message).encode())


def send(conn, data):
    """`data` in pieces; an empty body is one empty piece, so the other end always hears one."""
    if not data:
        conn.send_bytes(DATA)
        return
    for start in range(0, len(data), CHUNK):
        conn.send_bytes(DATA + bytes(data[start : start + CHUNK]))


def hear(conn):
    """(True, a dict) for a message, (False, bytes) for a piece of a body. EOFError when the other end
    is gone, OSError for a message past MAX_MESSAGE, ValueError for one that does not parse."""
    raw = conn.recv_bytes(MAX_MESSAGE)
    kind, payload = raw[:1], raw[1:]
    if kind == CONTROL:
        message = json.loads(payload)
        if not isinstance(message, dict):
            raise ValueError("a message that is not an object")
        return True, message
    if kind == DATA:
        return False, payload
    raise ValueError("a message of no known kind")
