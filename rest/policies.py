"""Who may do what on the tables and functions tables.toml declares (tables_toml/tables.py): the one
place a rule is decided. The table API asks `authorize` for a Grant, and a Grant's condition keeps a
caller to the rows its owner rule and its row policy admit (rest/reflection.py reflects the
database)."""

import difflib
from dataclasses import dataclass, field

import sqlalchemy as sa

from errors import APIError, Rest
from extensions import state
from row_policies import RowPolicy, applying
from tables_toml.tables import Policy


@dataclass(frozen=True)
class Grant:
    """Permission for one operation; `owner_id` set means only the rows that user owns; `using`,
    the row policy that chooses the rows it touches; `check`, the one rows it writes must pass;
    `values`, the policies' parameters for this caller."""

    policy: Policy
    owner_id: int | None = None
    using: RowPolicy | None = None
    check: RowPolicy | None = None
    values: dict = field(default_factory=dict)

    def condition(self, table, named=False):
        """The WHERE condition that keeps a caller to the rows it may touch, or None. `named`: the
        owner's id and the policy's parameters have no value of their own, for a plan that every
        caller's request runs with its own (`plan_values`)."""
        parts = []
        if self.owner_id is not None:
            column = table.c[self.policy.owner_column]
            owner = sa.bindparam("owner", type_=column.type, required=True) if named else self.owner_id
            parts.append(column == owner)
        if self.using is not None:
            parts.append(self.using.clause(table, None if named else self.values))
        return None if not parts else parts[0] if len(parts) == 1 else sa.and_(*parts)

    def plan_values(self):
        """The values of condition(named=True)'s parameters."""
        # Every parameter the policy names: an app_metadata key the caller lacks is NULL.
        values = {name: self.values.get(name) for name in self.using.params} if self.using else {}
        if self.owner_id is not None:
            values["owner"] = self.owner_id
        return values

    def owns(self, value):
        """Whether an owner_column value names the granted owner (always true without an owner rule)."""
        return self.owner_id is None or str(value) == str(self.owner_id)

    def check_owner(self, values):
        """A 403 when the column values of a write set the owner to another user than the granted one."""
        column = self.policy.owner_column
        if column in values and not self.owns(values[column]):
            raise denied("permission denied to set the owner of a row to another user")


def policies():
    """The exposed tables, {name: Policy}, as tables.toml declares them."""
    return state().tables_toml.tables


def lookup(name):
    """The policy of an exposed table; a 404 naming the nearest exposed one otherwise."""
    return _find(policies(), "table", name, Rest.TABLE_NOT_FOUND)


def functions():
    """tables.toml's functions, {name: Function}."""
    return state().tables_toml.functions


def lookup_function(name):
    """The function `name`; a 404 naming the nearest one otherwise."""
    return _find(functions(), "function", name, Rest.FUNCTION_NOT_FOUND)


def table_not_found(name, nearest=None):
    """PostgREST's 404 for a table it does not serve."""
    return APIError(
        404,
        Rest.TABLE_NOT_FOUND,
        f"Could not find the table 'public.{name[:100]}' in the schema cache",
        hint=f"Perhaps you meant the table 'public.{nearest}'" if nearest else None,
    )


def _find(registry, kind, name, code):
    found = registry.get(name)
    if found is None:
        nearest = difflib.get_close_matches(name, list(registry), n=1) if len(name) <= 100 else []
        if kind == "table":  # PostgREST's words, the schema named
            raise table_not_found(name, nearest[0] if nearest else None)
        raise APIError(
            404,
            code,
            f"Could not find the {kind} '{name[:100]}'",
            hint=f"Perhaps you meant the {kind} '{nearest[0]}'" if nearest else None,
        )
    return found


def may_execute(function, who):
    """Whether `who` may call `function`: its execute rule, with `owner` meaning any signed-in user
    (a function keeps to its caller's rows through :uid)."""
    rule = function.rule
    if who.role == "service_role" or rule == "anon":
        return True
    return who.role == "authenticated" and rule in ("authenticated", "owner")


def authorize_function(function, who):
    if not may_execute(function, who):
        raise _rule_refused(who, function.rule, f"function '{function.name}'")


def grants(name, who, *operations):
    """The Grant of `who` for each of `operations` on table `name` (None for a None): the 404 of a
    table not exposed, the 405 of a write to a read-only table, or the 401/403 of a refused rule,
    before anything else about the request is looked at."""
    policy = lookup(name)
    if policy.read_only and any(operation not in (None, "select") for operation in operations):
        raise read_only(name, "users change through /auth/v1")
    return [None if operation is None else authorize(policy, operation, who) for operation in operations]


def read_only(name, why):
    return APIError(
        405, Rest.READ_ONLY, f"table '{name}' is read-only: {why}", headers={"Allow": "GET, HEAD"}
    )


def authorize(policy, operation, who):
    """The Grant for `who` to do `operation` on the table, with the row policy that applies (the
    service_role key passes them all); 401 (anon) or 403 (signed in) when the rule refuses."""
    rule = policy.rules[operation]
    if who.role == "service_role":
        return Grant(policy)
    if rule == "anon" or (who.role == "authenticated" and rule in ("authenticated", "owner")):
        owner = who.user_id if rule == "owner" else None
        return Grant(policy, owner, *applying(policy.row_policies, operation, who))
    raise _rule_refused(who, rule, f"table '{policy.table}'")


def violation(table):
    """A row written that its row policy does not admit: PostgreSQL's words for it."""
    return APIError(
        403, Rest.INSUFFICIENT_PRIVILEGE, f'new row violates row-level security policy for table "{table}"'
    )


def _rule_refused(who, rule, what):
    status = 401 if who.role == "anon" else 403
    hint = "Only the service key may do this." if rule == "service_role" else "Sign in first."
    return denied(f"permission denied for {what}", status, hint)


def denied(message, status=403, hint=None):
    """The error for what a rule refuses: 401 to an anonymous caller, 403 to a signed-in one."""
    return APIError(status, Rest.INSUFFICIENT_PRIVILEGE, message, hint=hint)
