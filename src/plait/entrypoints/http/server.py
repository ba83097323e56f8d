"""Service processes: ``plait serve`` (the HTTP API, optionally with an in-process worker)
and ``plait worker`` (a worker alone). Settings come from environment variables, flags
override them; logs are JSON lines on stderr carrying run and session ids.

=========================  ==========================================================
``PLAIT_DB``               store URL (``postgresql://...`` to share it across machines)
``PLAIT_HOST``             address to listen on (default ``127.0.0.1``)
``PLAIT_PORT``             port (default ``8000``)
``PLAIT_MODEL``            model spec the workers use (``scripted:PATH``, ...)
``PLAIT_SERVE_WORKERS``    runs the API process drives itself (default 4 for SQLite and
                           memory stores, 0 for PostgreSQL: run ``plait worker`` there)
``PLAIT_WORKER_CONCURRENCY``  runs one ``plait worker`` drives at once (default 4)
``PLAIT_LEASE_SECONDS``    run lease (default 60); a dead worker's run is recovered after
``PLAIT_GRACE_SECONDS``    on SIGTERM, how long in-flight runs may finish (default 30)
``PLAIT_EVENT_POLL_SECONDS``  how often event streams poll the store while live
                           notifications are unavailable (PostgreSQL listener down;
                           default 0.5)
``PLAIT_MAX_BODY_BYTES``   largest request body (default 1000000)
``PLAIT_WORKSPACE_ROOT``   directory under which each principal's sessions name workspaces
``PLAIT_LOG_LEVEL``        ``debug``, ``info`` (default), ``warning``, ``error``
``PLAIT_WEBHOOK_RETRY_SECONDS``  waits between webhook attempts, comma-separated
                           (default 5,30,120,600,3600,10800,21600,43200; +0-20% jitter)
``PLAIT_WEBHOOK_LEASE_SECONDS``  a delivery's lease: a killed worker's is resent after
                           (default 60)
``PLAIT_WEBHOOK_TIMEOUT_SECONDS``  one webhook POST (default 10)
``PLAIT_WEBHOOK_POLL_SECONDS``  how often idle workers look for due deliveries (default 1)
``PLAIT_WEBHOOK_PAUSE_AFTER``  consecutive failures that pause an endpoint (default 20)
=========================  ==========================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from plait.domain.errors import ConfigError
from plait.domain.webhooks import PAUSE_AFTER, RETRY_SECONDS

T = TypeVar("T")

__all__ = [
    "ENV_HELP",
    "Settings",
    "build_context",
    "configure_logging",
    "context_for",
    "event_feed",
    "run_worker",
    "serve",
]

log = logging.getLogger("plait.worker")

ENV_HELP = __doc__.split("\n\n", 1)[1] if __doc__ else ""

_EXTRAS = ("run_id", "session_id", "worker", "principal", "status", "code")
_EXTRAS_HTTP = ("approval_id", "method", "path")  # of an HTTP request that failed


class JsonLogs(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in (*_EXTRAS, *_EXTRAS_HTTP):
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogs())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The pool warns at every reconnection attempt; the worker says once per outage.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _int(env: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}", name=name) from None
    if value < low:
        raise ConfigError(f"{name} must be at least {low}, got {value}", name=name)
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}", name=name) from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}", name=name)
    return value


def _floats(env: Mapping[str, str], name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        values = tuple(float(part) for part in raw.split(","))
    except ValueError:
        raise ConfigError(
            f"{name} must be comma-separated numbers of seconds, got {raw!r}", name=name
        ) from None
    if any(v < 0 for v in values):
        raise ConfigError(f"{name} may not hold negative waits, got {raw!r}", name=name)
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    db: str
    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None
    serve_workers: int = 0
    worker_concurrency: int = 4
    lease_seconds: float = 60.0
    grace_seconds: float = 30.0
    event_poll_seconds: float = 0.5
    max_body_bytes: int = 1_000_000
    workspace_root: Path | None = None
    log_level: str = "info"
    webhook_retry_seconds: tuple[float, ...] = RETRY_SECONDS
    webhook_lease_seconds: float = 60.0
    webhook_timeout_seconds: float = 10.0
    webhook_poll_seconds: float = 1.0
    webhook_pause_after: int = PAUSE_AFTER

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
        """Environment variables, then flags (those not ``None``) over them."""
        from plait.runtime import default_db_url

        e = os.environ if env is None else env
        given = {k: v for k, v in flags.items() if v is not None}
        db = given.pop("db", None) or e.get("PLAIT_DB") or default_db_url()
        shared = db.startswith(("postgresql://", "postgres://"))
        root = e.get("PLAIT_WORKSPACE_ROOT")
        level = e.get("PLAIT_LOG_LEVEL", "info").lower()
        if level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"PLAIT_LOG_LEVEL must be debug, info, warning or error: {level!r}")
        base = cls(
            db=db,
            host=e.get("PLAIT_HOST", "127.0.0.1"),
            port=_int(e, "PLAIT_PORT", 8000),
            model=e.get("PLAIT_MODEL") or None,
            serve_workers=_int(e, "PLAIT_SERVE_WORKERS", 0 if shared else 4),
            worker_concurrency=_int(e, "PLAIT_WORKER_CONCURRENCY", 4, low=1),
            lease_seconds=_float(e, "PLAIT_LEASE_SECONDS", 60.0),
            grace_seconds=_float(e, "PLAIT_GRACE_SECONDS", 30.0),
            event_poll_seconds=_float(e, "PLAIT_EVENT_POLL_SECONDS", 0.5),
            max_body_bytes=_int(e, "PLAIT_MAX_BODY_BYTES", 1_000_000, low=1024),
            workspace_root=Path(root) if root else None,
            log_level=level,
            webhook_retry_seconds=_floats(e, "PLAIT_WEBHOOK_RETRY_SECONDS", RETRY_SECONDS),
            webhook_lease_seconds=_float(e, "PLAIT_WEBHOOK_LEASE_SECONDS", 60.0),
            webhook_timeout_seconds=_float(e, "PLAIT_WEBHOOK_TIMEOUT_SECONDS", 10.0),
            webhook_poll_seconds=_float(e, "PLAIT_WEBHOOK_POLL_SECONDS", 1.0),
            webhook_pause_after=_int(e, "PLAIT_WEBHOOK_PAUSE_AFTER", PAUSE_AFTER, low=1),
        )
        fields = {k: v for k, v in given.items() if k in cls.__dataclass_fields__}
        return cls(**{**{f: getattr(base, f) for f in cls.__dataclass_fields__}, **fields})


def _runtime(settings: Settings, *, need_model: bool) -> Any:
    from plait.runtime import Runtime

    if need_model and not settings.model:
        raise ConfigError(
            "workers need a model: set PLAIT_MODEL or pass --model (e.g. scripted:PATH)"
        )
    return Runtime.open(
        db=settings.db,
        model=settings.model if need_model else None,
        lease_seconds=settings.lease_seconds,
        store_io="thread",  # several runs at once: one slow fsync must not stall the others
    )


def _check_service_store(store: Any, url: str) -> None:
    from plait.adapters.stores.shared.redact import redact_url

    for method in ("claim_queued_run", "append_run_events", "find_api_key"):
        if not hasattr(store, method):
            url = redact_url(url)
            raise ConfigError(
                f"the store {url!r} cannot run the service (no run queue); use "
                "postgresql://..., sqlite:///... or memory://",
                url=url,
            )


def build_context(settings: Settings) -> Any:
    """The API's object graph; with ``serve_workers`` > 0 an in-process worker too."""
    rt = _runtime(settings, need_model=settings.serve_workers > 0)
    return context_for(rt, settings)


def context_for(rt: Any, settings: Settings) -> Any:
    """The API over an opened :class:`~plait.runtime.Runtime` (tests pass one with
    fakes). The context closes the runtime when the app shuts down."""
    from plait.application.fork import ForkService
    from plait.entrypoints.http.app import ApiContext
    from plait.entrypoints.http.auth import Authenticator

    _check_service_store(rt.store, settings.db)
    feed = event_feed(getattr(rt.store, "url", settings.db), settings.event_poll_seconds)
    ctx = ApiContext(
        store=rt.store,
        queue=rt.store,
        service=rt.service,
        auth=Authenticator(rt.store),
        forks=ForkService(
            store=rt.store, clock=rt.service.clock, telemetry=getattr(rt, "telemetry", None)
        ),
        workspace_root=settings.workspace_root,
        max_body_bytes=settings.max_body_bytes,
        feed=feed,
    )
    if settings.serve_workers > 0:
        ctx.lifespan_hooks.append(_worker_hook(rt, settings, settings.serve_workers, feed))
    ctx.lifespan_hooks.append(_feed_hook(ctx))
    ctx.on_close.append(lambda: ctx.feed.close() if ctx.feed is not None else _nothing())
    ctx.on_close.append(rt.close)
    return ctx


def _feed_hook(ctx: Any) -> Any:
    async def hook() -> AsyncIterator[None]:
        if ctx.feed is not None:
            ctx.feed.start()  # listen from start-up, not from the first stream on
        yield

    return hook


async def _nothing() -> None:
    return None


def event_feed(url: str, poll_seconds: float = 0.5) -> Any:
    """Live events for the SSE streams of this process: PostgreSQL ``LISTEN`` (events
    of workers anywhere), else in-process (the embedded worker tells it directly)."""
    if url.startswith(("postgresql://", "postgres://")):
        from plait.adapters.stores.postgres.feed import PgEventFeed

        return PgEventFeed(url, poll_seconds=poll_seconds)
    from plait.application.event_feed import LocalEventFeed

    return LocalEventFeed(poll_seconds=poll_seconds)


def _make_worker(rt: Any, settings: Settings, concurrency: int, feed: Any = None) -> Any:
    from plait.application.worker import Worker
    from plait.entrypoints.http.events import encode_event

    return Worker(
        service=rt.service,
        queue=rt.store,
        encode=encode_event,
        concurrency=concurrency,
        grace_seconds=settings.grace_seconds,
        feed=feed,
    )


async def _no_webhooks() -> None:
    return None


def _configured_webhooks() -> list[Any]:
    """The ``[webhooks.NAME]`` endpoints of the config files."""
    from plait.config import load_config
    from plait.domain.webhooks import configured_endpoints

    return configured_endpoints(load_config().webhooks, os.environ)


def start_webhooks(rt: Any, settings: Settings, stop: asyncio.Event) -> asyncio.Future[None]:
    """The webhook delivery loop of a worker (until ``stop``), on a store with an
    outbox; an awaitable that ends with it (and closes its HTTP client)."""
    from plait.adapters.webhook_sender import HttpxSender
    from plait.application.webhooks import WebhookDispatcher

    store = rt.store
    if not hasattr(store, "claim_deliveries"):
        return asyncio.ensure_future(_no_webhooks())
    configured = _configured_webhooks()  # a bad table stops the start-up, here
    sender = HttpxSender(timeout=settings.webhook_timeout_seconds)
    dispatcher = WebhookDispatcher(
        store=store,
        sender=sender,
        clock=rt.service.clock,
        owner=rt.service.owner,
        lease_seconds=max(settings.webhook_lease_seconds, settings.webhook_timeout_seconds),
        poll_seconds=settings.webhook_poll_seconds,
        schedule=settings.webhook_retry_seconds,
        pause_after=settings.webhook_pause_after,
    )

    async def go() -> None:
        try:
            if configured and rt.webhooks is not None:
                await rt.webhooks.put_configured(configured)
            await dispatcher.run(stop)
        finally:
            await sender.close()

    return asyncio.ensure_future(go())


def _worker_hook(rt: Any, settings: Settings, concurrency: int, feed: Any) -> Any:
    async def hook() -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(
            _supervise(lambda: _make_worker(rt, settings, concurrency, feed), stop)
        )
        webhooks = start_webhooks(rt, settings, stop)
        try:
            yield
        finally:
            stop.set()
            await task
            await webhooks

    return hook


async def _supervise(make: Any, stop: asyncio.Event) -> None:
    """The API process's own worker, for as long as the API runs: a worker lives through
    store outages by itself (see :mod:`plait.application.worker`); one that stops on
    any other error is logged and replaced after a backoff, so the process never keeps
    answering ``202`` with nobody to drive the runs."""
    from plait.application.worker import Backoff

    backoff = Backoff(first=1.0, most=30.0)
    while not stop.is_set():
        try:
            await make().run(stop)
        except Exception as e:
            log.error("the in-process worker stopped: %s: %s; restarting it", type(e).__name__, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.delay())


def serve(settings: Settings) -> None:
    """Run the API until SIGINT/SIGTERM (uvicorn shuts down gracefully)."""
    import uvicorn

    from plait.entrypoints.http.app import create_app

    configure_logging(settings.log_level)
    app = create_app(build_context(settings))
    config = uvicorn_config(
        app, host=settings.host, port=settings.port, grace_seconds=settings.grace_seconds
    )
    uvicorn.Server(config).run()


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    grace_seconds: float | None = None,
    header_timeout: float | None = None,
    keep_alive: int | None = None,
) -> Any:
    """How ``plait serve`` runs uvicorn: h11 with a deadline on request heads and a
    keep-alive timeout (see :mod:`plait.entrypoints.http.protocol`), no access log."""
    import uvicorn

    from plait.entrypoints.http import protocol as p

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=p.protocol(p.HEADER_TIMEOUT_SECONDS if header_timeout is None else header_timeout),
        timeout_keep_alive=p.KEEP_ALIVE_SECONDS if keep_alive is None else keep_alive,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=None if grace_seconds is None else int(grace_seconds),
        loop="asyncio",  # not uvloop (see run_async): the API's streams are tested on this
    )


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (less CPU per await and per socket
    event: a worker's cost is mostly its event loop and its store I/O), else on the
    standard loop. Workers only: ``plait serve`` stays on the standard loop (its event
    streams' fallback to polling stalled on uvloop under load)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(main)
    return uvloop.run(main)


async def run_worker(settings: Settings) -> dict[str, Any]:
    """A worker process: until SIGINT/SIGTERM, then a graceful shutdown."""
    configure_logging(settings.log_level)
    rt = _runtime(settings, need_model=True)
    _check_service_store(rt.store, settings.db)
    worker = _make_worker(rt, settings, settings.worker_concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    webhooks = start_webhooks(rt, settings, stop)
    try:
        stats = await worker.run(stop)
    finally:
        stop.set()
        await webhooks
        await rt.close()
    return {
        "worker": worker.owner,
        "claimed": stats.claimed,
        "recovered": stats.recovered,
        "released": stats.released,
        "finished": stats.finished,
        "outages": stats.outages,
    }
