"""The served process's log writer (logs.py): request threads only queue their records; one thread
writes them in batches, and stopping it writes what is still queued."""

import io
import logging
import time

from runtime import logs
from support import eventually


def record(message, *args, name="minibase.requests", level=logging.INFO):
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


def test_records_are_written_in_batches_and_stop_writes_the_rest():
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600).start()  # never looks by itself in this test
    handler = writer.handler()
    for n in range(5):
        handler.handle(record("GET /rest/v1/items %s %.1fms", 200, n))
    assert stream.getvalue() == ""  # queued, not written by the request's thread
    writer.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert lines[0].endswith("INFO minibase.requests: GET /rest/v1/items 200 0.0ms")
    assert lines[4].endswith("GET /rest/v1/items 200 4.0ms")


def test_the_writer_looks_by_itself():
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=0.01).start()
    try:
        writer.handler().handle(record("written without a stop"))
        eventually(
            lambda: "written without a stop" in stream.getvalue(), 5, 0.01, "the writer wrote the record"
        )
    finally:
        writer.stop()


def test_a_record_that_cannot_be_formatted_does_not_stop_the_others():
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600).start()
    handler = writer.handler()
    handler.handle(record("%d requests", "not a number"))
    handler.handle(record("after"))
    writer.stop()
    lines = stream.getvalue().splitlines()
    assert "unloggable record from minibase.requests" in lines[0]
    assert lines[1].endswith("after")


def test_a_flood_of_records_is_written_in_bounded_batches():
    """What arrives while a batch is being written waits for the next one: a flood cannot keep one
    batch (and its memory) growing."""
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600)
    handler = writer.handler()
    for n in range(3):
        handler.handle(record("line %s", n))
    original = writer.formatter.format

    def format_and_add_another(item):
        writer.records.append(record("late"))
        return original(item)

    writer.formatter.format = format_and_add_another
    writer.write_pending()
    assert stream.getvalue().count("\n") == 3 and len(writer.records) == 3


def test_the_queue_is_bounded_and_says_what_it_dropped(monkeypatch):
    monkeypatch.setattr(logs, "MAX_QUEUED", 3)
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600)
    handler = writer.handler()
    for n in range(5):
        handler.handle(record("line %s", n))
    writer.write_pending()
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines[:3]] == ["line 0", "line 1", "line 2"]
    assert lines[3].endswith(
        "WARNING minibase: 2 log records dropped: more than 3 were waiting to be written"
    )


class Broken(io.StringIO):
    def write(self, text):
        raise BrokenPipeError


def test_a_stream_that_cannot_be_written_does_not_stop_the_writer():
    writer = logs.Writer(stream=Broken(), interval=0.01).start()
    writer.handler().handle(record("lost"))
    time.sleep(0.1)
    writer.handler().handle(record("lost too"))
    writer.stop()
    assert not writer._thread.is_alive() and len(writer.records) == 0


def test_each_line_has_its_own_time_to_the_millisecond():
    """The date and time are written once a second and reused: each line still shows its own
    record's time, across a change of second too."""
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600)
    handler = writer.handler()
    for created in (1_700_000_000.123, 1_700_000_000.987, 1_700_000_001.004, 1_700_000_000.5):
        line = record("GET / 200")
        line.created, line.msecs = created, (created % 1) * 1000
        handler.handle(line)
    writer.write_pending()
    stamps = [line.split(" INFO ")[0] for line in stream.getvalue().splitlines()]
    expected = [
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(created))) + f",{int(created % 1 * 1000):03d}"
        for created in (1_700_000_000.123, 1_700_000_000.987, 1_700_000_001.004, 1_700_000_000.5)
    ]
    assert stamps == expected


def test_a_filter_on_the_handler_still_applies():
    stream = io.StringIO()
    writer = logs.Writer(stream=stream, interval=3600)
    handler = writer.handler()
    handler.addFilter(lambda item: "secret" not in item.getMessage())
    handler.handle(record("a secret"))
    handler.handle(record("kept"))
    writer.write_pending()
    assert stream.getvalue().splitlines()[0].endswith("kept") and "secret" not in stream.getvalue()
