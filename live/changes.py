"""Postgres changes: which subscriptions a join may hold, and the feed that delivers the changes of
opted-in tables to them."""


class Refused(Exception):
    """A postgres_changes subscription the join's reply refuses, in Supabase's words."""


def subscribe(wanted, who):
    """The Subscriptions for the join's `postgres_changes` list."""
    if wanted:
        raise Refused(unable(wanted[0] if isinstance(wanted[0], dict) else {}))
    return []


def unable(params):
    return (
        "RealtimeDisabledForConfiguration: Unable to subscribe to changes with given parameters. Please "
        "check Realtime is enabled for the given connect parameters: [event: {}, schema: {}, table: {}, "
        "filters: {}]".format(
            params.get("event", "*"),
            params.get("schema", "public"),
            params.get("table", "*"),
            params.get("filter", ""),
        )
    )


def still_readable(subscriptions, who):
    return not subscriptions


class Feed:
    def __init__(self, server):
        self.server = server

    async def start(self):
        pass

    async def stop(self):
        pass

    def add(self, channel):
        pass

    def remove(self, channel):
        pass
