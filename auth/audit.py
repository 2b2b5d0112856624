"""The audit log: every auth event (sign-in, failed sign-in, lockout, password change, ban, deletion,
factor change) and every dashboard action, with actor, IP and time, written by the service that does
the thing, in its transaction: an entry commits with what it records, or neither does.

Who is acting and from where is the request's, which services do not read: the view layer says it
once per request (`begin`, `acting`), and `record` reads it from a context variable."""

import contextvars
from dataclasses import dataclass

from sqlalchemy import func, insert, or_, select

from auth import tokens
from auth.users import is_anonymous
from extensions import db
from models import users_table
from models.auth import AuditEntry

# The doors an entry comes through.
AUTH, ADMIN, DASHBOARD, CLI = "auth", "admin", "dashboard", "cli"
MAX_TEXT = 255  # actor; a longer one (a hostile address at a failed sign-in) is cut
MAX_TARGET = 512


@dataclass(frozen=True)
class Context:
    ip: str
    via: str
    actor: str | None = None
    actor_id: int | None = None


_context = contextvars.ContextVar("minibase_audit", default=None)
COMMAND_LINE = Context(ip="local", via=CLI, actor="cli")  # no request: the command line


def begin(ip, via):
    """A request starts: its client IP and door; no actor yet."""
    _context.set(Context(ip=ip[:64], via=via))


def acting(actor, actor_id=None, via=None):
    """The caller is known: the service key ("service_role"), or an admin in the dashboard."""
    current = _context.get() or COMMAND_LINE
    # Made directly: dataclasses.replace takes several times as long, on every signed-in request.
    _context.set(Context(current.ip, via or current.via, actor, actor_id))


def record(action, target=None, details=None, actor=None, actor_id=None):
    """Add an entry to the running transaction. `actor` defaults to the request's (the user an auth
    event is about acts for themselves: the caller passes them)."""
    context = _context.get() or COMMAND_LINE
    if actor is None:
        actor, actor_id = context.actor or "anonymous", context.actor_id
    values = {
        "created_at": tokens.utcnow(),
        "actor": str(actor)[:MAX_TEXT],
        "actor_id": actor_id,
        "action": action,
        "target": None if target is None else str(target)[:MAX_TARGET],
        "ip": context.ip,
        "via": context.via,
        "details": details or None,
    }
    db.session.execute(insert(AuditEntry).values(values))


def user_target(user_id, email=None):
    """`user 8 (ann@example.com)`: the user's address is in every entry about them (read here when
    the caller does not have it), so that searching the log for it finds their ban and their
    deletion, and still does once the user and the address are gone."""
    if email is None:
        users = users_table()
        email = db.session.execute(select(users.c.email).where(users.c.user_id == user_id)).scalar()
        if is_anonymous(email):
            email = None  # an anonymous user's placeholder address is nobody's
    return f"user {user_id}" + (f" ({email})" if email else "")


def _like(text):
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def entries(page, per_page, query=""):
    """One page of entries, newest first, whose actor, action, target or IP contains `query` (any
    case); and how many match in all."""
    condition = True
    if query:
        pattern = _like(query)
        condition = or_(
            *(func.lower(column).like(pattern, escape="\\") for column in (
                AuditEntry.actor, AuditEntry.action, AuditEntry.target, AuditEntry.ip, AuditEntry.via
            ))
        )  # fmt: skip
    total = db.session.execute(select(func.count()).select_from(AuditEntry).where(condition)).scalar()
    rows = db.session.execute(
        select(AuditEntry)
        .where(condition)
        .order_by(AuditEntry.id.desc())
        .limit(per_page)
        .offset((page - 1) * per_page)
    ).scalars()
    return [entry_object(row) for row in rows], total


def entry_object(row):
    return {
        "id": row.id,
        "created_at": row.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "actor": row.actor,
        "actor_id": row.actor_id,
        "action": row.action,
        "target": row.target,
        "ip": row.ip,
        "via": row.via,
        "details": row.details or {},
    }
