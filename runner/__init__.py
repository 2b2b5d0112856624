"""Runs the operator's functions (FUNCTIONS_DIR) in worker processes under limits, for /functions/v1.

    api        what a function's module sees: Request, Caller, Response, clients of minibase's APIs
    directory  names, modules, versions, config.toml's [functions.NAME], a worker's environment
    pool       the worker processes: started, kept warm per function and version, killed
    worker     the worker process itself (`python -m runner.worker FD`)
    wire       the messages between the two, over one socket (never pickled)
    service    a call: Supabase's status codes for every failure; `invoke`, the entry point for
               webhooks and schedules
    journal    every call's log line and the recent calls the dashboard shows
    scaffold   `flask --app app functions new NAME`

Nothing here imports Flask, and this file imports nothing: a worker imports only api and wire."""
