"""The database underneath both APIs: connections with bounded waits, and the one transaction helper."""
