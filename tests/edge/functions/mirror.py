"""functions-js's `mirror`: the request back as JSON (url, method, headers, body), its body read as
the `response-type` header says (json, form, blob, arrayBuffer, or text)."""

import json


def handler(request, caller):
    kind = request.headers.get("response-type")
    content_type = "application/json"
    if kind == "json":
        body = request.json()
    elif kind == "form":
        body = [
            [name, value if isinstance(value, str) else value.data.decode()] for name, value in request.form()
        ]
    elif kind in ("blob", "arrayBuffer"):
        body = request.body.decode("utf-8", "replace")
        content_type = "application/octet-stream"
    else:
        body = request.text()
        content_type = "text/plain"
    answer = {
        "url": request.url or "empty",
        "method": request.method or "empty",
        "headers": [[name.lower(), value] for name, value in request.headers.items()],
        "body": body if body is not None else "empty",
    }
    return json.dumps(answer), 200, {"content-type": content_type}
