"""A dashboard action: the work, done by the service the API calls for it, and its audit entry,
committed together. The actor and IP are the request's (auth.audit.acting, set for the signed-in
admin)."""

from auth import audit
from database import transactions


def perform(action, target, work, *args, details=None, **kwargs):
    """`work(*args, **kwargs)` with the entry `action` on `target` added to the first unit of work
    it commits (a service that runs its own, such as an upload, keeps running it its way); work's
    result. `action` None: the service records its own event (a ban, a deletion, a removed factor)."""
    if action is None:
        return work(*args, **kwargs)
    with transactions.alongside(lambda: audit.record(action, target, details)):
        return work(*args, **kwargs)


def write(work, *args, **kwargs):
    """`work` as a unit of work, for a service function that runs none of its own."""
    return transactions.write(work, *args, **kwargs)


def read(work, *args, **kwargs):
    """A page's data, read in one transaction that changes nothing."""
    return transactions.read(work, *args, **kwargs)
