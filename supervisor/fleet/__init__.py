"""The fleet: several daemons sharing the sessions through one PostgreSQL store (docs/runtime.md)."""
