"""The one clock: every expiry, window and timestamp minibase computes reads it, so tests can move it."""

import time
from datetime import UTC, datetime


def now():
    """Seconds since the epoch."""
    return int(time.time())


def utcnow():
    """The clock as a naive UTC datetime, for database columns."""
    return datetime.fromtimestamp(now(), UTC).replace(tzinfo=None)
