"""Helpers shared by tests: fixture tables, the hudi-rs oracle, servers, table models."""
