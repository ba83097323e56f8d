"""The PostgreSQL store (service mode: many processes and machines)."""
