"""Frames the service frames itself (live.protocol.wire, written by the server's WIRE extension):
byte for byte what the websockets library writes, and, through a real socket, in the order they
were sent whether they went out at once or waited in the socket's queue."""

import socket
import threading
import time

import pytest
from phoenix import Client
from websockets.frames import Frame, Opcode

from live import hub, protocol, sessions
from runtime import uvicorn_seam


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
@pytest.mark.parametrize("kind", ["text", "unicode", "binary"])
def test_a_frame_framed_once_is_what_the_websockets_library_writes(kind, size):
    if kind == "binary":
        frame = bytes(n % 256 for n in range(size))
        library = Frame(Opcode.BINARY, frame)
    else:
        frame = ("é" if kind == "unicode" else "x") * size
        library = Frame(Opcode.TEXT, frame.encode())
    assert protocol.wire(frame) == library.serialize(mask=False, extensions=[])


def test_the_app_and_the_server_name_the_extension_alike():
    assert sessions.WIRE == uvicorn_seam.WIRE


def test_once_a_frame_waits_in_the_queue_the_next_ones_wait_behind_it():
    # The server writes framed bytes only while its buffer has room (write_wire says whether it did).
    room, written = [True], []

    def write_wire(data):
        if room[0]:
            written.append(data)
        return room[0]

    connection = hub.Connection(protocol.V1, 10, write_wire)
    connection.send_frame("a")
    room[0] = False
    connection.send_frame("b")
    room[0] = True  # room again, but "b" still waits for the writer: "c" goes behind it
    connection.send_frame("c")
    assert written == [protocol.wire("a")] and list(connection.outbox) == ["b", "c"]
    connection.outbox.clear()
    connection.sending = True  # the writer took "c" from the queue and may not have sent it yet
    connection.send_frame("d")
    assert written == [protocol.wire("a")] and list(connection.outbox) == ["d"]
    connection.sending = False
    connection.outbox.clear()
    connection.send_frame("e", b"framed once")  # a broadcast's bytes, framed once for every socket
    assert written == [protocol.wire("a"), b"framed once"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_frames_written_at_once_and_frames_queued_arrive_in_order(start_server):
    # A reader that does not read fills its socket's buffers: what follows waits in its queue. When
    # it reads again, the queue drains while more broadcasts keep coming: none may overtake it.
    # Every frame must come, once, in the order sent.
    server = start_server(REALTIME_MAX_QUEUE=100000, REALTIME_MAX_EVENTS=1000000)
    small = socket.create_connection(("127.0.0.1", server.port))
    small.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 131072)  # else the kernel buffers up to 32 MB
    sender, reader = Client(server), Client(server, "2.0.0", sock=small)
    for client in (sender, reader):
        client.join("order")
    big, count = "x" * 20_000, 3000  # the first 600 (12 MB): more than the buffers hold

    def send():
        for n in range(count):
            payload = {"n": n, "b": big} if n < 600 else {"n": n}
            sender.send(
                "realtime:order", "broadcast", {"type": "broadcast", "event": "e", "payload": payload}
            )
            if n >= 600:
                time.sleep(0.001)  # the small ones keep coming while the queue drains

    sending = threading.Thread(target=send)
    sending.start()
    time.sleep(0.5)
    seen = [reader.until("broadcast", timeout=30)["payload"]["payload"]["n"] for _ in range(count)]
    sending.join()
    assert seen == list(range(count))
    reader.nothing()
