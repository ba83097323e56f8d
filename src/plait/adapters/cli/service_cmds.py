"""Service-mode commands: ``plait db upgrade`` (more join as they land).

Registered by :func:`register`; handlers take the parsed arguments and the output
helper of :mod:`plait.adapters.cli.main`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from plait.domain.errors import ConfigError

__all__ = ["COMMANDS", "register"]

Common = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, common: Common) -> None:
    db = sub.add_parser("db", help="manage the store's schema (PostgreSQL)")
    dsub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dsub.add_parser(
        "upgrade",
        help="apply missing schema migrations (PostgreSQL; also done on start-up)",
    )
    common(up)


def _db_upgrade(a: argparse.Namespace, out: Any) -> int:
    from plait.adapters.stores import open_store
    from plait.adapters.stores.postgres import PostgresStore
    from plait.runtime import default_db_url

    url = getattr(a, "db", None) or default_db_url()
    store = open_store(url)
    if not isinstance(store, PostgresStore):
        raise ConfigError(
            f"plait db upgrade is for PostgreSQL stores (postgresql://...); {url!r} "
            "needs no migration step (it is created and checked on open)",
            url=url,
        )

    async def go() -> tuple[int, int]:
        try:
            return await store.upgrade()
        finally:
            await store.close()

    before, after = asyncio.run(go())
    text = (
        f"schema is current (version {after})"
        if before == after
        else f"schema upgraded from version {before} to {after}"
    )
    out.emit({"from_version": before, "to_version": after}, text)
    return 0


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("db", "upgrade"): _db_upgrade,
}
