"""The in-memory store (tests, demos)."""
