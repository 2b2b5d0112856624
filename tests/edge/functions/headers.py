"""Sets the connection's own headers, a wrong length, and headers of its own."""


def handler(request, caller):
    return "four", {"Connection": "close", "Transfer-Encoding": "chunked", "Content-Length": "99",
                    "Upgrade": "websocket", "X-Own": "kept", "Set-Cookie": "a=1"}  # fmt: skip
