"""The daemon: the anyio service loop, per-table tasks and the HTTP endpoints."""
