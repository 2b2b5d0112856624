"""Database webhooks and schedules: the changes and the clock that call out (docs/webhooks.md).

(tables_toml/webhooks.py reads [webhooks.NAME] and [schedules.NAME] of tables.toml)
sending.py    a signed POST in Standard Webhooks' form, and its outcome
outbox.py     the deliveries: taken from the events the triggers write, claimed, recorded
schedules.py  the due runs: claimed once per (schedule, due time), run, recorded
worker.py     the threads that do both in a serving process
"""
