"""Realtime (/realtime/v1): Phoenix channels over a WebSocket, as Supabase Realtime speaks them to
realtime-js and supabase-py: Broadcast, Presence and Postgres changes."""
