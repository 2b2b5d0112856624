"""GET /rest/v1/: an OpenAPI 3 description of the exposed tables, as the caller may use them, and
of the auth endpoints: what each operation answers, its errors included (in the API's error body),
and which tables are read-only (views, the users table)."""

from datetime import date, datetime, time
from decimal import Decimal

from errors import APIError
from rest import policies, reflection
from values import is_tinyint_boolean, python_type

METHODS = {"select": "get", "insert": "post", "update": "patch", "delete": "delete"}
SCALARS = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    Decimal: {"type": "number"},
    str: {"type": "string"},
    datetime: {"type": "string", "format": "date-time"},
    date: {"type": "string", "format": "date"},
    time: {"type": "string", "format": "time"},
}
AUTH_PATHS = {
    "/auth/v1/signup": {"post": "Sign up with email and password; returns a session"},
    "/auth/v1/token": {"post": "grant_type=password or refresh_token; returns a session"},
    "/auth/v1/user": {
        "get": "The signed-in user",
        "patch": "Update the signed-in user",
        "put": "Update the signed-in user",
    },
    "/auth/v1/logout": {"post": "End the session (scope=global|local|others); 204"},
    "/auth/v1/settings": {"get": "Whether sign-up is open and whether addresses are confirmed by mail"},
    "/auth/v1/recover": {"post": "Mail a password-recovery link and code; 200 {} for any address"},
    "/auth/v1/otp": {"post": "Mail a magic link and code, signing the address up when asked"},
    "/auth/v1/resend": {"post": "Mail a sign-up's or an address change's confirmation again"},
    "/auth/v1/verify": {
        "get": "The link in a mail: a 303 to redirect_to with the session in the fragment",
        "post": "Redeem a token_hash, or an address and its 6-digit code, for a session",
    },
    "/auth/v1/invite": {"post": "Invite an address (service_role); mails a link"},
    "/auth/v1/admin/generate_link": {
        "post": "A link and code for an address, returned not mailed (service_role)"
    },
}
ERROR = {"$ref": "#/components/schemas/Error"}
AUTH_ERROR = {"$ref": "#/components/schemas/AuthError"}
ERROR_SCHEMAS = {
    "Error": {
        "type": "object",
        "description": "The table API's error body (PostgREST's)",
        "required": ["message", "code"],
        "properties": {
            "message": {"type": "string"},
            "code": {
                "oneOf": [{"type": "integer"}, {"type": "string"}],
                "description": "the HTTP status; for an official SDK (or REST_ERROR_CODES=postgrest) "
                "PostgREST's code: a SQLSTATE such as 23505, or PGRSTnnn",
            },
            "hint": {"type": "string", "nullable": True},
            "details": {"type": "string", "nullable": True},
        },
    },
    "AuthError": {
        "type": "object",
        "description": "The auth API's error body (GoTrue's): `code` is the HTTP status and `error_code` "
        "the reason; with X-Supabase-Api-Version, `code` is the reason and `msg`/`error_code` are left out",
        "required": ["code", "message"],
        "properties": {
            "code": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
            "error_code": {"type": "string"},
            "msg": {"type": "string"},
            "message": {"type": "string"},
        },
    },
}
# What each status means on the table API, and which operations answer it.
REST_ERRORS = {
    "400": "A query string, body or value that does not parse or convert (the message names the part); "
    "a PATCH or DELETE without a filter",
    "401": "No API key or an invalid one; a bad, expired or logged-out access token; the rule refuses anon",
    "403": "The rule refuses this signed-in user, or a row would get another owner",
    "406": "`Accept: application/vnd.pgrst.object+json` and not exactly one row, or an Accept not offered",
    "409": "A unique or foreign-key violation",
    "413": "A body over 1 MB",
    "416": "An offset or Range past the rows (`Prefer: count=exact`)",
    "503": "The database did not answer within DB_TIMEOUT, or a statement ran past STATEMENT_TIMEOUT",
}
ERRORS_OF = {
    "select": ("400", "401", "403", "406", "416", "503"),
    "insert": ("400", "401", "403", "406", "409", "413", "503"),
    "update": ("400", "401", "403", "406", "409", "413", "503"),
    "delete": ("400", "401", "403", "406", "409", "503"),
    "rpc": ("400", "401", "403", "409", "503"),
}
AUTH_ERRORS = {
    "400": "Bad input, invalid credentials, an invalid or used token or code",
    "401": "No API key or an invalid one; a missing, bad or expired access token",
    "422": "Validation refused (a weak password, an address in use, an aal2 session needed, …)",
    "429": "Over a rate limit (Retry-After says when to come back)",
    "503": "The database did not answer within DB_TIMEOUT",
}
PREFER = {
    "name": "Prefer",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "return=representation: the body is the rows written; return=minimal (the default): "
    "no body",
}


def errors(statuses, meanings=REST_ERRORS, schema=ERROR):
    """The responses for `statuses`, each with its meaning and the error body's schema."""
    return {
        status: {"description": meanings[status], "content": {"application/json": {"schema": schema}}}
        for status in statuses
    }


def document(who):
    paths, schemas = {}, {}
    for name, policy in sorted(policies.policies().items()):
        allowed = {op: rule for op, rule in policy.rules.items() if _allowed(policy, op, who)}
        if not allowed:
            continue
        try:
            table = reflection.reflected(name)
        except APIError:
            continue  # listed, but not in the database (yet)
        read_only = "it is a view" if table.info.get("view") else None
        if policy.read_only:
            read_only = "users change through /auth/v1"
        if read_only:  # a write would be a 405 whatever the rules say
            allowed = {op: rule for op, rule in allowed.items() if op == "select"}
            if not allowed:
                continue
        schemas[name] = table_schema(table, read_only)
        paths[f"/rest/v1/{name}"] = {
            METHODS[op]: _operation(name, op, rule, policy.owner_column) for op, rule in allowed.items()
        }
    for function in policies.functions().values():
        if policies.may_execute(function, who):
            paths[f"/rest/v1/rpc/{function.name}"] = _function(function)
    for path, operations in AUTH_PATHS.items():
        status = "204" if path.endswith("logout") else "200"
        failures = ("401",) if path.endswith("settings") else tuple(AUTH_ERRORS)
        responses = {status: {"description": "OK"}, **errors(failures, AUTH_ERRORS, AUTH_ERROR)}
        paths[path] = {
            method: {"summary": summary, "tags": ["auth"], "responses": responses}
            for method, summary in operations.items()
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "minibase", "version": "1.0.0"},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": {**schemas, **ERROR_SCHEMAS},
            "securitySchemes": {
                "apikey": {"type": "apiKey", "in": "header", "name": "apikey"},
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
        },
        "security": [{"apikey": []}],
    }


def _allowed(policy, operation, who):
    try:
        policies.authorize(policy, operation, who)
    except APIError:
        return False
    return True


def _operation(name, operation, rule, owner_column):
    description = f"rule: {rule}"
    if rule == "owner":
        description += f" (only rows whose {owner_column} is the caller's user id)"
    reference = {"$ref": f"#/components/schemas/{name}"}
    body = (
        {"oneOf": [reference, {"type": "array", "items": reference}]} if operation == "insert" else reference
    )
    spec = {"summary": f"{operation} {name}", "description": description, "tags": [name]}
    if operation in ("insert", "update"):
        spec["requestBody"] = {"content": {"application/json": {"schema": body}}}
    rows = {"content": {"application/json": {"schema": {"type": "array", "items": reference}}}}
    if operation == "select":
        responses = {
            "200": {"description": "The rows", **rows},
            "206": {
                "description": "Part of the rows (`Prefer: count=exact`): Content-Range says which",
                **rows,
            },
        }
    else:
        spec["parameters"] = [PREFER]
        if operation == "insert":
            responses = {
                "201": {
                    "description": "Created. With `Prefer: return=representation` the body is the stored "
                    "rows; with `return=minimal` (the default) there is no body",
                    **rows,
                },
                "200": {"description": "An upsert that only merged rows (`Prefer: resolution=…`)", **rows},
            }
        else:
            done = "Updated" if operation == "update" else "Deleted"
            responses = {
                "204": {"description": f"{done}; no body (`Prefer: return=minimal`, the default)"},
                "200": {"description": f"{done}: the rows, with `Prefer: return=representation`", **rows},
            }
    spec["responses"] = {**responses, **errors(ERRORS_OF[operation])}
    return spec


def _function(function):
    """POST (and GET, unless it writes) /rest/v1/rpc/{name}: its arguments, what it returns."""
    arguments = [name for name in function.params if name not in ("uid", "request_headers")]  # the server's
    summary = f"function {function.name} ({function.returns}): " + (", ".join(arguments) or "no arguments")
    required = [name for name in arguments if name not in function.defaults]
    body = {"type": "object", "properties": {name: {} for name in arguments}}
    if required:  # OpenAPI 3.0 wants a non-empty list, or none
        body["required"] = required
    result = {"rows": {"type": "array", "items": {"type": "object"}}, "one": {"type": "object"}}
    schema = result.get(function.returns, {})
    responses = {"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}}
    if function.returns == "void":
        responses = {"204": {"description": "No Content"}}
    responses.update(errors(ERRORS_OF["rpc"]))
    spec = {"post": {"summary": summary, "tags": ["rpc"], "responses": responses,
                     "requestBody": {"content": {"application/json": {"schema": body}}}}}  # fmt: skip
    if not function.writes:
        parameters = [
            {"name": name, "in": "query", "required": name in required, "schema": {}} for name in arguments
        ]
        spec["get"] = {"summary": summary, "tags": ["rpc"], "parameters": parameters, "responses": responses}
    return spec


def table_schema(table, read_only=None):
    """The table's columns as a JSON schema; every one readOnly, and the table marked `x-read-only`
    with the reason, when the table cannot be written (`read_only`)."""
    keys = {column.key for column in reflection.primary_key(table)}
    properties, required = {}, []
    for column in table.c:
        kind = bool if is_tinyint_boolean(column.type) else python_type(column.type)
        prop = dict(SCALARS.get(kind, {}))
        optional = column.nullable and column.key not in keys  # SQLite reports its keys nullable
        if optional:
            prop["nullable"] = True
        if column.key in keys:
            prop["description"] = "primary key"
        length = getattr(column.type, "length", None)
        if prop.get("type") == "string" and isinstance(length, int):
            prop["maxLength"] = length
        if read_only:
            prop["readOnly"] = True
        properties[column.key] = prop
        generated = column.server_default is not None or column is table.autoincrement_column
        if not optional and not generated:
            required.append(column.key)
    schema = {"type": "object", "properties": properties}
    if required and not read_only:
        schema["required"] = required
    if read_only:
        schema.update({"description": f"read-only: {read_only}", "x-read-only": True})
    return schema
