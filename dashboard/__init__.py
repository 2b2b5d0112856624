"""The dashboard's services: who is signed in to it (sessions.py), and each page's work done through
the services the APIs call, with its audit entry in the same transaction (actions.py)."""
