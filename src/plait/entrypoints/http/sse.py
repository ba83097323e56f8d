"""The run event stream: persisted events after the client's last one, then live ones
as any worker persists them, ending after ``run_finished``. New events are always read
from the store by sequence (so resuming and crossing processes and machines need nothing
more); a :class:`~plait.application.event_feed.RunEventFeed` only says when to read.

A failure once the stream has started (the response's status is sent) cannot become an
error response any more: the stream ends with an ``error`` event carrying the one error
shape (no ``id``: a client resumes with the last event it got) and a properly ended body,
and the failure is logged with the run's id."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

from plait.adapters.shapes import run_json
from plait.application.event_feed import RunEventFeed
from plait.application.ports import RunQueue, SessionStore
from plait.domain.errors import PlaitError, StoreUnavailableError
from plait.domain.service import EventType
from plait.entrypoints.http._errors import error_body, status_and_body
from plait.entrypoints.http.events import sse_frame

__all__ = ["event_stream"]

KEEPALIVE_S = 15.0
SETTLE_S = 2.0
"""After the run is terminal, how long to wait for its worker's last events."""

log = logging.getLogger("plait.http")


async def event_stream(
    queue: RunQueue,
    store: SessionStore,
    run_id: str,
    after: int,
    *,
    feed: RunEventFeed | None = None,
    poll_min_s: float = 0.02,
    poll_max_s: float = 0.25,
) -> AsyncIterator[str]:
    """The stream of :func:`_events`, ended by an ``error`` event if it fails."""
    try:
        async for frame in _events(
            queue, store, run_id, after, feed=feed, poll_min_s=poll_min_s, poll_max_s=poll_max_s
        ):
            yield frame
    except Exception as error:
        yield _failed(run_id, error)


def _failed(run_id: str, error: Exception) -> str:
    """Log the failure; the ``error`` frame that ends the stream."""
    status, body = status_and_body(error) if isinstance(error, PlaitError) else (500, None)
    extra = {"run_id": run_id, "code": getattr(error, "code", "internal")}
    if isinstance(error, StoreUnavailableError):  # an outage, not a defect: no traceback
        log.warning("run event stream ended by a store outage: %s", error.message, extra=extra)
        message = "the store is unavailable for now; reconnect later with Last-Event-ID"
        body = error_body(error.code, message)
    elif status >= 500:
        trace = (type(error), error, error.__traceback__)
        log.error(
            "run event stream failed: %s: %s",
            type(error).__name__,
            error,
            exc_info=trace,
            extra=extra,
        )
        message = "the server could not continue the stream; reconnect with Last-Event-ID"
        body = error_body("internal", message)
    else:
        log.warning("run event stream ended: %s", error, extra=extra)
    return f"event: error\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _events(
    queue: RunQueue,
    store: SessionStore,
    run_id: str,
    after: int,
    *,
    feed: RunEventFeed | None = None,
    poll_min_s: float = 0.02,
    poll_max_s: float = 0.25,
) -> AsyncIterator[str]:
    """With a ``feed`` the stream sleeps until it says the run has new events (a poll
    interval at most while the feed is not live); without one it polls, backing off
    from ``poll_min_s`` to ``poll_max_s``."""
    last = after
    delay = poll_min_s
    idle = 0.0
    terminal_for = 0.0
    notified = False
    yield ": stream of run events; reconnect with Last-Event-ID to resume\n\n"
    while True:
        events = await queue.read_run_events(run_id, after=last, limit=500)
        for event in events:
            last = event.seq
            yield sse_frame(event)
            if event.type is EventType.RUN_FINISHED:
                return
        if events:
            delay, idle, terminal_for = poll_min_s, 0.0, 0.0
            continue
        # A wake-up with nothing new (cannot happen unless the feed lags the store):
        # poll this round, so a stale hint never spins.
        stale, notified = notified, False
        run = await store.get_run(run_id)
        if run.status.terminal:
            if terminal_for >= SETTLE_S:
                # The worker died before persisting its last event: say how it ended.
                data = {"run_id": run_id, "type": "run_finished", "run": run_json(run)}
                yield f"event: run_finished\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
                return
            terminal_for += delay
        started = time.monotonic()
        if feed is None or stale or run.status.terminal:
            await asyncio.sleep(delay)
        else:
            notified = await feed.wait(run_id, after=last, at_most=KEEPALIVE_S - idle)
        idle += time.monotonic() - started
        if idle >= KEEPALIVE_S:
            idle = 0.0
            yield ": keepalive\n\n"
        delay = min(delay * 2, poll_max_s)
