"""The WSGI entry point: a host that imports `app` (or `application`) from here gets the service
(without Realtime: a WSGI host cannot hold a socket). `python wsgi.py` serves it with uvicorn and
Realtime on the same port (asgi.py), or with waitress when REALTIME=off (server.py), in WORKERS
processes (workers.py) when set, and drains on SIGTERM."""

import sys

import config
from app import create_app
from runtime import logs

if __name__ == "__main__":  # a host that imports this module logs its own way
    logs.log_directly(config.from_environment()["LOG_FORMAT"])  # what starting logs is in LOG_FORMAT too
app = application = create_app()


def main():
    from auth import outbox, tokens
    from runtime import server, workers
    from webhooks import worker

    secret = app.config["JWT_SECRET"]
    print(f"anon key:         {tokens.api_key('anon', secret)}")
    if sys.stdout.isatty():
        print(f"service_role key: {tokens.api_key('service_role', secret)}")
    else:  # a service manager's log is read by more people than should hold this key
        print("service_role key: not printed to a log; `flask --app app keys` prints it")
    host, port, threads = app.config["HOST"], app.config["PORT"], app.config["THREADS"]
    sockets = app.config["REALTIME"]
    server.settle_heap()  # before the workers fork: what they share stays shared
    if app.config["WORKERS"] > 1:
        logs.log_directly(app.config["LOG_FORMAT"])
        sys.exit(workers.serve(app, host, port, threads, app.config["WORKERS"], sockets))
    writer = logs.log_in_batches(app.config["LOG_FORMAT"])
    outbox.start_sender(app)  # the mail a process that died left unsent (each worker has its own)
    background = worker.Background(app).start()  # webhooks and schedules
    if sockets:
        try:
            serve_sockets(host, port, threads)
        finally:
            background.stop()
            writer.stop()
        return
    running = server.make_server(app, host, port, threads)
    print(f"serving on http://{host}:{running.effective_port}", flush=True)
    try:
        server.serve(running)
    finally:
        background.stop()
        writer.stop()  # writes what is still queued


def serve_sockets(host, port, threads):
    from live.sessions import Realtime
    from runtime import asgi, workers

    listener = workers.listen(host, port)
    print(f"serving on http://{host}:{listener.getsockname()[1]} (with Realtime)", flush=True)
    running = asgi.make_server(app, Realtime(app), None, None, threads, asgi.stop_on_signals(), [listener])
    asgi.serve(running)


if __name__ == "__main__":
    main()
