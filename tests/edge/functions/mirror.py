"""functions-js's `mirror`: the request back as JSON (url, method, headers, body), its body read as
the `response-type` header says (json, form, blob, arrayBuffer, or text). Deno's original labels
its JSON text/plain when the body is read as text, which functions-js then hands back as a string
where its own specs expect the object: here JSON is labelled JSON. A body read as a blob or an
arrayBuffer is answered as application/octet-stream, as the original does."""

import json
import os


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
    url = request.url
    origin = os.environ.get("DENO_ORIGIN")
    if origin:  # behind functions-js's relay a function saw this origin, and no /functions/v1
        query = request.url.partition("?")[2]
        url = origin + request.path + (f"?{query}" if query else "")
    answer = {
        "url": url or "empty",
        "method": request.method or "empty",
        "headers": [[name.lower(), value] for name, value in request.headers.items()],
        "body": body if body is not None else "empty",
    }
    return json.dumps(answer), 200, {"content-type": content_type}
