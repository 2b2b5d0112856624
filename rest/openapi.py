"""GET /rest/v1/: an OpenAPI 3 description of the exposed tables, as the caller may use them, and
of the auth endpoints."""

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
        schemas[name] = table_schema(table)
        paths[f"/rest/v1/{name}"] = {
            METHODS[op]: _operation(name, op, rule, policy.owner_column) for op, rule in allowed.items()
        }
    for function in policies.functions().values():
        if policies.may_execute(function, who):
            paths[f"/rest/v1/rpc/{function.name}"] = _function(function)
    for path, operations in AUTH_PATHS.items():
        status = "204" if path.endswith("logout") else "200"
        paths[path] = {
            method: {"summary": summary, "tags": ["auth"], "responses": {status: {"description": "OK"}}}
            for method, summary in operations.items()
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "minibase", "version": "1.0.0"},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
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
    status = {"select": "200", "insert": "201"}.get(operation, "204")
    rows = {"type": "array", "items": reference}
    spec["responses"] = {status: {"description": "OK", "content": {"application/json": {"schema": rows}}}}
    return spec


def _function(function):
    """POST (and GET, unless it writes) /rest/v1/rpc/{name}: its arguments, what it returns."""
    arguments = [name for name in function.params if name != "uid"]
    summary = f"function {function.name} ({function.returns}): " + (", ".join(arguments) or "no arguments")
    body = {"type": "object", "properties": {name: {} for name in arguments}}
    if arguments:  # OpenAPI 3.0 wants a non-empty list, or none
        body["required"] = arguments
    result = {"rows": {"type": "array", "items": {"type": "object"}}, "one": {"type": "object"}}
    schema = result.get(function.returns, {})
    responses = {"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}}
    spec = {"post": {"summary": summary, "tags": ["rpc"], "responses": responses,
                     "requestBody": {"content": {"application/json": {"schema": body}}}}}  # fmt: skip
    if not function.writes:
        parameters = [{"name": name, "in": "query", "required": True, "schema": {}} for name in arguments]
        spec["get"] = {"summary": summary, "tags": ["rpc"], "parameters": parameters, "responses": responses}
    return spec


def table_schema(table):
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
        properties[column.key] = prop
        generated = column.server_default is not None or column is table.autoincrement_column
        if not optional and not generated:
            required.append(column.key)
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema
