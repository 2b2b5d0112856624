"""A dashboard action: the work, done by the service the API calls for it, and its audit entry, in one
transaction. The actor and IP are the request's (auth.audit.acting, set for the signed-in admin)."""

from auth import audit
from database import transactions


def perform(action, target, work, *args, details=None, **kwargs):
    """`work(*args, **kwargs)` and the entry `action` on `target`, committed together; work's result.
    `action` None: the service records its own event (a ban, a deletion, a factor removed)."""

    def unit():
        result = work(*args, **kwargs)
        if action is not None:
            audit.record(action, target, details)
        return result

    unit.__name__ = getattr(work, "__name__", "dashboard_action")
    return transactions.write(unit)


def read(work, *args, **kwargs):
    """A page's data, read in one transaction that changes nothing."""
    return transactions.read(work, *args, **kwargs)
