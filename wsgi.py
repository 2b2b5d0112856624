"""The WSGI entry point: a host that imports `app` (or `application`) from here gets the service;
`python wsgi.py` serves it with waitress (server.py) and drains on SIGTERM."""

import logging
import logging.handlers
import queue
import sys

from app import create_app

app = application = create_app()


def main():
    import server
    import tokens

    writer = log_through_a_queue()
    secret = app.config["JWT_SECRET"]
    print(f"anon key:         {tokens.api_key('anon', secret)}")
    if sys.stdout.isatty():
        print(f"service_role key: {tokens.api_key('service_role', secret)}")
    else:  # a service manager's log is read by more people than should hold this key
        print("service_role key: not printed to a log; `flask --app app keys` prints it")
    host, port = app.config["HOST"], app.config["PORT"]
    running = server.make_server(app, host, port, app.config["THREADS"])
    print(f"serving on http://{host}:{running.effective_port}", flush=True)
    try:
        server.serve(running)
    finally:
        writer.stop()  # writes what is still queued


def log_through_a_queue():
    """INFO and above to stderr, written by one thread of its own: a request thread only puts its
    line on a queue. Under load, the threads writing each line themselves queued for the handler's
    lock, and that cost (measured with 8 threads and 16 connections) more than a request itself."""
    records = queue.SimpleQueue()
    to_queue = logging.handlers.QueueHandler(records)
    to_queue.setFormatter(logging.Formatter("%(message)s"))  # the writer adds time, level and name
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[to_queue])
    writer = logging.handlers.QueueListener(records, stderr)
    writer.start()
    return writer


if __name__ == "__main__":
    main()
