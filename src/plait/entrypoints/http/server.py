"""Service processes: ``plait serve`` (the HTTP API, optionally with an in-process worker)
and ``plait worker`` (a worker alone). Their settings are resolved at the root
(:func:`plait.settings.resolve_settings` with ``service=``: environment variables, flags
over them; listed in :data:`ENV_HELP`); logs are JSON lines on stderr carrying run and
session ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from plait.domain.errors import ConfigError
from plait.settings import SERVICE_ENV_HELP, ServiceSettings
from plait.settings import Settings as RootSettings

if TYPE_CHECKING:
    from plait.runtime import Runtime

T = TypeVar("T")

Settings = ServiceSettings
"""The service processes' settings (:class:`plait.settings.ServiceSettings`)."""

__all__ = [
    "ENV_HELP",
    "Settings",
    "build_context",
    "configure_logging",
    "context_for",
    "run_worker",
    "serve",
]

log = logging.getLogger("plait.worker")

ENV_HELP = SERVICE_ENV_HELP

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


def _runtime(settings: RootSettings, *, need_model: bool) -> Runtime:
    """The runtime of a service process over its resolved settings."""
    # lazy: plait --help imports this module (ENV_HELP); the runtime costs ~50 ms
    from plait.runtime import Runtime

    service = settings.service
    assert service is not None, "resolve_settings(service=...) resolves these"
    if need_model and not settings.model:
        raise ConfigError(
            "workers need a model: set PLAIT_MODEL or pass --model (e.g. scripted:PATH)"
        )
    return Runtime.open(
        settings=settings,
        lease_seconds=service.lease_seconds,
        store_io="thread",  # several runs at once: one slow fsync must not stall the others
    )


def _check_service_store(store: Any, url: str) -> None:
    # lazy: plait --help imports this module (ENV_HELP); the stores package is for serving
    from plait.adapters.stores import redact_url

    if not (store.capabilities.run_queue and store.capabilities.api_keys):
        url = redact_url(url)
        raise ConfigError(
            f"the store {url!r} cannot run the service (no run queue); use "
            "postgresql://..., sqlite:///... or memory://",
            url=url,
        )


def build_context(settings: RootSettings) -> Any:
    """The API's object graph; with ``serve_workers`` > 0 an in-process worker too."""
    service = settings.service
    assert service is not None, "resolve_settings(service=...) resolves these"
    rt = _runtime(settings, need_model=service.serve_workers > 0)
    return context_for(rt, service)


def context_for(rt: Any, settings: ServiceSettings) -> Any:
    """The API over an opened :class:`~plait.runtime.Runtime` (tests pass one with
    fakes). The context closes the runtime when the app shuts down."""
    # lazy: plait --help imports this module (ENV_HELP); the API's modules load FastAPI
    from plait.application.fork import ForkService
    from plait.entrypoints.http.app import ApiContext
    from plait.entrypoints.http.auth import Authenticator

    _check_service_store(rt.store, settings.db)
    feed = rt.event_feed(settings.db, settings.event_poll_seconds)
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


def _make_worker(rt: Any, settings: ServiceSettings, concurrency: int, feed: Any = None) -> Any:
    # lazy: plait --help imports this module (ENV_HELP); the worker loads the HTTP event codec
    from plait.entrypoints.http.events import encode_event

    return rt.worker(
        encode=encode_event,
        concurrency=concurrency,
        grace_seconds=settings.grace_seconds,
        feed=feed,
    )


async def _no_webhooks() -> None:
    return None


def start_webhooks(rt: Any, settings: ServiceSettings, stop: asyncio.Event) -> asyncio.Future[None]:
    """The webhook delivery loop of a worker (until ``stop``), on a store with an
    outbox; an awaitable that ends with it (and closes its HTTP client)."""
    if not rt.store.capabilities.webhooks:
        return asyncio.ensure_future(_no_webhooks())
    configured = rt.configured_webhooks()  # a bad table stops the start-up, here
    dispatcher, sender = rt.webhook_dispatcher(settings)

    async def go() -> None:
        try:
            if configured and rt.webhooks is not None:
                await rt.webhooks.put_configured(configured)
            await dispatcher.run(stop)
        finally:
            await sender.close()

    return asyncio.ensure_future(go())


def _worker_hook(rt: Any, settings: ServiceSettings, concurrency: int, feed: Any) -> Any:
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
    # lazy: plait --help imports this module (ENV_HELP); the worker loads the application layer
    from plait.application.worker import Backoff

    backoff = Backoff(first=1.0, most=30.0)
    while not stop.is_set():
        try:
            await make().run(stop)
        except Exception as error:
            log.error(
                "the in-process worker stopped: %s: %s; restarting it", type(error).__name__, error
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.delay())


def serve(settings: RootSettings) -> None:
    """Run the API until SIGINT/SIGTERM (uvicorn shuts down gracefully)."""
    # lazy: plait --help imports this module (ENV_HELP); uvicorn is for serving only
    import uvicorn

    # lazy: same block
    from plait.entrypoints.http.app import create_app

    service = settings.service
    assert service is not None, "resolve_settings(service=...) resolves these"
    configure_logging(service.log_level)
    app = create_app(build_context(settings))
    config = uvicorn_config(
        app, host=service.host, port=service.port, grace_seconds=service.grace_seconds
    )
    config.load()  # uvicorn's own modules and objects, before they are frozen
    settle_start_up()
    uvicorn.Server(config).run()


def settle_start_up() -> int:
    """Collect once, then move every object alive now out of the cyclic GC's reach
    (``gc.freeze``) and return how many. A service process keeps what it built at
    start-up (modules, the app, the runtime, the store's pool) for its whole life, and
    a full collection while it serves would scan all of it again for nothing: a stall of
    33-108 ms per worker process under load (``benchmarks/svc_load.py``), every run in
    flight on it waiting. Frozen objects are still freed when nothing refers to them;
    only a cycle among them would be kept. Once, when start-up is done."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up objects frozen: %d", frozen)
    return frozen


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
    # lazy: plait --help imports this module (ENV_HELP); uvicorn is for serving only
    import uvicorn

    # lazy: same block
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
        # lazy: optional (a worker's loop where it is installed)
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(main)
    return uvloop.run(main)


async def run_worker(settings: RootSettings) -> dict[str, Any]:
    """A worker process: until SIGINT/SIGTERM, then a graceful shutdown."""
    service = settings.service
    assert service is not None, "resolve_settings(service=...) resolves these"
    configure_logging(service.log_level)
    rt = _runtime(settings, need_model=True)
    _check_service_store(rt.store, settings.db)
    worker = _make_worker(rt, service, service.worker_concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    webhooks = start_webhooks(rt, service, stop)
    settle_start_up()
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
