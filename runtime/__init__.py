"""The process: serving with waitress, the request log, and the command line."""
