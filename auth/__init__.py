"""The auth API's services: users, sessions, e-mail flows, tokens and passwords."""
