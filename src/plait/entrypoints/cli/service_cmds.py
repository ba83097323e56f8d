"""Service-mode commands: ``plait db upgrade``, ``plait keys create``, ``plait serve``,
``plait worker``.

Registered by :func:`register`; handlers take the parsed arguments and the output
helper of :mod:`plait.entrypoints.cli.main`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from plait.adapters.system import RandomIds, SystemClock
from plait.domain.errors import ConfigError
from plait.domain.service import Role
from plait.entrypoints.cli import _loop, webhooks
from plait.entrypoints.cli.webhooks import COMMANDS as WEBHOOK_COMMANDS
from plait.entrypoints.http.server import run_async, run_worker, serve
from plait.settings import SERVICE_ENV_HELP, resolve_settings

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

    keys = sub.add_parser("keys", help="API keys of the HTTP service")
    ksub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    kc = ksub.add_parser("create", help="create a bearer key for a principal (printed once)")
    kc.add_argument("--principal", required=True, help="who the key acts as (owns sessions)")
    kc.add_argument("--admin", action="store_true", help="may see every principal's sessions")
    common(kc)

    env = "settings (environment variables; flags override them):\n" + SERVICE_ENV_HELP
    sv = sub.add_parser(
        "serve",
        help="run the HTTP API (with an in-process worker for SQLite)",
        epilog=env,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sv.add_argument("--host", help="listen address ($PLAIT_HOST, default 127.0.0.1)")
    sv.add_argument("--port", type=int, help="port ($PLAIT_PORT, default 8000)")
    sv.add_argument("--model", help="model of the in-process worker ($PLAIT_MODEL)")
    sv.add_argument(
        "--workers", dest="serve_workers", type=int, help="in-process runs ($PLAIT_SERVE_WORKERS)"
    )
    common(sv)
    wk = sub.add_parser(
        "worker",
        help="drive queued runs of a shared store until SIGTERM",
        epilog=env,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wk.add_argument("--model", help="model spec ($PLAIT_MODEL)")
    wk.add_argument(
        "--concurrency",
        dest="worker_concurrency",
        type=int,
        help="runs at once ($PLAIT_WORKER_CONCURRENCY, default 4)",
    )
    common(wk)

    webhooks.register(sub, common)


def _db_upgrade(args: argparse.Namespace, out: Any) -> int:
    # lazy: the runtime (~50 ms) and the PostgreSQL driver are for this command only
    from plait.adapters.stores import PostgresStore
    from plait.runtime import open_store

    url = resolve_settings(db=getattr(args, "db", None)).db
    if not url.startswith(("postgresql://", "postgres://")):  # refused before anything is made
        raise ConfigError(
            f"plait db upgrade is for PostgreSQL stores (postgresql://...); {url!r} "
            "needs no migration step (it is created and checked on open)",
            url=url,
        )
    store = open_store(url)
    assert isinstance(store, PostgresStore)

    async def go() -> tuple[int, int]:
        try:
            return await store.upgrade()
        finally:
            await store.close()

    before, after = _loop.run(go())
    text = (
        f"schema is current (version {after})"
        if before == after
        else f"schema upgraded from version {before} to {after}"
    )
    out.emit({"from_version": before, "to_version": after}, text)
    return 0


def _keys_create(args: argparse.Namespace, out: Any) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.entrypoints.http.auth import create_key
    from plait.runtime import open_store

    url = resolve_settings(db=getattr(args, "db", None)).db
    store: Any = open_store(url)
    if not store.capabilities.api_keys:
        raise ConfigError(f"the store {url!r} cannot hold API keys; use PostgreSQL or SQLite")
    role = Role.ADMIN if args.admin else Role.USER

    async def go() -> tuple[Any, str]:
        try:
            return await create_key(
                store, principal=args.principal, role=role, clock=SystemClock(), ids=RandomIds()
            )
        finally:
            await store.close()

    key, secret = _loop.run(go())
    data = {"key_id": key.id, "principal": key.principal, "role": key.role.value, "key": secret}
    out.emit(data, f"{secret}\n(key {key.id} for {key.principal}, {key.role.value}; shown once)")
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """The service process's settings, resolved once: defaults, config files,
    environment, then these flags."""
    flags = vars(args)
    return resolve_settings(db=flags.get("db"), model=flags.get("model"), service=flags)


def _serve(args: argparse.Namespace, out: Any) -> int:
    serve(_settings(args))
    return 0


def _worker(args: argparse.Namespace, out: Any) -> int:
    stats = run_async(run_worker(_settings(args)))
    out.emit(stats, "worker stopped: " + json.dumps(stats))
    return 0


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("db", "upgrade"): _db_upgrade,
    ("keys", "create"): _keys_create,
    ("serve",): _serve,
    ("worker",): _worker,
}


def _webhook_commands() -> None:
    COMMANDS.update(WEBHOOK_COMMANDS)


_webhook_commands()
