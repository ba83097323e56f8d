"""The PostgreSQL server of the crash cases: each case creates its own database on it
(see ``tests.crash.agent_proc.store_url``); they are dropped when the session ends."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest


@pytest.fixture(scope="session")
def crash_pg(pg_url: str) -> Iterator[str]:
    """Lets the case processes (children of this one) create their databases."""
    prefix = f"plait_crash_{secrets.token_hex(3)}"
    os.environ["PLAIT_CRASH_PG_URL"] = pg_url
    os.environ["PLAIT_CRASH_PG_PREFIX"] = prefix
    try:
        yield pg_url
    finally:
        del os.environ["PLAIT_CRASH_PG_URL"], os.environ["PLAIT_CRASH_PG_PREFIX"]
        drop_case_databases(pg_url, prefix)


def drop_case_databases(server: str, prefix: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)
        ).fetchall()
        for (name,) in rows:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
