"""The database underneath every API: connections with bounded waits, and the one transaction helper."""
