"""Server-sent events, one every 50 ms: each must reach the client as it is made."""

import time


def handler(request, caller):
    def events():
        for number in range(int(request.query.get("n", "5"))):
            yield f"data: {number}\n\n"
            time.sleep(0.05)

    return events(), {"Content-Type": "text/event-stream"}
