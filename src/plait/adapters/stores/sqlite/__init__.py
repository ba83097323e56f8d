"""The SQLite store (the default)."""
