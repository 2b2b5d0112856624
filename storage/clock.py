"""Time for the storage API: naive UTC in the database, to the millisecond (as Supabase Storage
keeps it), ISO 8601 with a Z on the wire."""

import datetime


def now():
    moment = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso(moment):
    if moment is None:
        return None
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond // 1000:03d}Z"
