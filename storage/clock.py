"""Time for the storage API: naive UTC in the database, ISO 8601 with a Z on the wire."""

import datetime


def now():
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)


def iso(moment):
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")
