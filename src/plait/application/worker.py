"""Workers: processes that drive queued runs (service mode, docs/design.md#surfaces).

A worker claims ``queued`` runs from the shared store (at most ``concurrency`` at a
time), drives each with :meth:`AgentService.execute` and persists the run's progress
events with a per-run sequence, so an API process anywhere can stream them. Every
``lease_seconds / 2`` it also looks for ``running`` runs whose lease expired (their worker
died) and recovers them with the usual semantics (:meth:`AgentService.recover`). On a
store that tracks workers' presence (:class:`~plait.application.claiming.WorkerPresence`,
PostgreSQL) it holds its own before its first claim and looks every 0.25 s: a dead
worker's runs are stale as soon as its process is gone, not when their leases expire.
Elsewhere (SQLite), given ``owner_alive``, the same look also takes over the runs whose
lease holder is a process of this host that has died (``plait serve`` killed and started
again): they are recovered at once, not when their leases expire. A stale run found while
every slot is taken is recovered at the next free slot, before the next queued run is
claimed.

Graceful shutdown (:meth:`Worker.run` returns once ``stop`` is set): it stops claiming,
lets in-flight runs finish for ``grace_seconds``, then abandons the rest (they stop
without writing anything more and stay ``running``) and releases their leases (expiry
set to now) so another worker recovers them at once.

Store outages (:class:`~plait.domain.errors.StoreUnavailableError`: the server restarts,
a connection died, the disk is full) never stop a worker, idle or busy: it logs one
warning per outage, backs off (0.1 s doubling to 5 s, with jitter) and goes on claiming;
one line says when the store is back. A run whose driving failed on the outage stops
where it was (its last commit is either in the store or not) and, once the store is
back, its lease is released so a worker recovers it at once with the usual rules (a side
effect in flight becomes ``awaiting_resolution``). Other errors than an outage end
:meth:`Worker.run` as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from plait.application.claiming import ClaimedRun, StartingQueue, WorkerPresence
from plait.application.event_feed import RunEventFeed
from plait.application.events import RunEvent, RunObserver
from plait.application.ports import (
    CarriedEvents,
    CarriesEvents,
    ReservesConnections,
    RunQueue,
    TextSink,
)
from plait.application.service import AgentService
from plait.domain.errors import LeaseLostError, PlaitError, StoreUnavailableError
from plait.domain.runs import Run, RunStatus
from plait.domain.service import EventType, NewRunEvent, RunEventRecord

__all__ = ["Backoff", "EventEncoder", "Worker", "WorkerStats"]

log = logging.getLogger("plait.worker")

EventEncoder = Callable[[RunEvent, float], Sequence[NewRunEvent]]
"""Turns a loop event (and the time it happened) into the events to persist."""

RESERVED_BEYOND_RUNS = 2
"""Connections a worker reserves beyond one per run it may drive at once (a store that
:class:`~plait.application.ports.ReservesConnections`): its claims and sweeps, its event
writes and lease renewals, which overlap the runs' own statements."""


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    recovered: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    released: int = 0
    outages: int = 0
    """Store outages lived through (each logged once)."""


class Backoff:
    """Bounded exponential backoff with jitter: ``first`` doubling up to ``most``, each
    delay drawn between half and all of it (workers that lost the store together do not
    come back in step)."""

    def __init__(self, first: float = 0.1, most: float = 5.0) -> None:
        self.first = first
        self.most = most
        self._next = first

    def delay(self) -> float:
        ceiling = self._next
        self._next = min(self.most, self._next * 2)
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._next = self.first


class _EventSink:
    """Batches events from the (synchronous) run observers into store writes: whatever
    accumulated while the previous write was in flight, or within ``linger`` seconds of
    the first event, goes out as one write for all the runs this worker drives (one
    durable commit, not one per run or per event: the store's cost per write, not the
    few milliseconds of delay, is what limits a busy worker).

    It is also an :class:`~plait.application.ports.EventCarrier`: on a store that carries
    events (PostgreSQL), any commit of one of this worker's runs takes every pending event
    of its runs into its own transaction (each run's fenced by its own lease token), so
    events wait ``hold`` seconds for such a commit (a step's events are emitted just
    before the commit that ends it, and a busy worker commits every few milliseconds)
    before this sink writes them itself; a run that ends while no other run is driven
    here has its last events written at once. A run's events are written by one write at
    a time, in the order they were emitted: while some are being written (by this sink
    or inside a commit) the run's later ones wait."""

    def __init__(
        self,
        queue: RunQueue,
        encode: EventEncoder,
        now: Callable[[], float],
        feed: RunEventFeed | None,
        linger: float = 0.0,
        token_of: Callable[[str], int | None] | None = None,
    ) -> None:
        self._store = queue
        self._encode = encode
        self._now = now
        self._feed = feed
        self._token_of = token_of
        self._pending: dict[str, list[tuple[NewRunEvent, int | None]]] = {}
        """Per run, the events not yet written nor being written, in order."""
        self._busy: set[str] = set()
        """Runs with events being written (by this sink's write or inside a commit)."""
        self._carried: dict[str, list[tuple[NewRunEvent, int | None]]] = {}
        """Events a commit took (:meth:`take`), until it settles."""
        self._since: dict[str, float] = {}
        """When each run's pending events began to wait (the loop's clock)."""
        self._due: set[str] = set()
        """Runs whose pending events go at the next write, without waiting ``hold``."""
        self.hold = 0.0
        """How long a run's events wait for its next commit to carry them (0: no
        carrying store, none wait)."""
        self._ready = asyncio.Event()
        """Set when events may be due for a write (not at each event: see :meth:`_arm`)."""
        self._timer: asyncio.TimerHandle | None = None
        """Sets ``_ready`` when the oldest waiting events' hold is over."""
        self._changed = asyncio.Event()
        """Set whenever a write ends (``drain`` looks again)."""
        self._task: asyncio.Task[None] | None = None
        self.linger = linger
        self.outage_seconds = 30.0
        """How long a write of events is retried while the store is unavailable."""
        self._closing = False
        self.carried = 0
        """Events written inside their run's commit (told to the feed like the others)."""

    def _token(self, run_id: str, event: RunEvent | None = None) -> int | None:
        """The lease token the run's events are written under (fencing): the one of the
        run the event carries, else the one the run is driven under now."""
        run = getattr(event, "run", None)
        if isinstance(run, Run):
            return run.lease_token
        return None if self._token_of is None else self._token_of(run_id)

    def _put(self, run_id: str, encoded: NewRunEvent, token: int | None) -> None:
        if run_id not in self._pending:
            self._since[run_id] = asyncio.get_running_loop().time()
            self._pending[run_id] = []
        self._pending[run_id].append((encoded, token))
        if self.hold <= 0:
            self._ready.set()
        elif self._timer is None:
            self._arm()

    def finished(self, run_id: str) -> None:
        """The run is no longer driven here: no commit will carry its events, write them
        at the next write."""
        if run_id in self._pending or run_id in self._busy:
            self._due.add(run_id)
            self._ready.set()

    def observer(self, run_id: str) -> RunObserver:
        def observe(event: RunEvent) -> None:
            token = self._token(run_id, event)
            for encoded in self._encode(event, self._now()):
                self._put(run_id, encoded, token)

        return observe

    def text_sink(self, run_id: str) -> TextSink:
        def on_text(delta: str) -> None:
            if delta:
                encoded = NewRunEvent(
                    type=EventType.TEXT_DELTA, at=self._now(), data={"text": delta}
                )
                self._put(run_id, encoded, self._token(run_id))

        return on_text

    # --- EventCarrier: a commit takes the pending events ---------------------------------

    def take(self, run_id: str, lease_token: int) -> CarriedEvents:
        """The pending events of every run not being written: the committing run's if all
        were emitted under ``lease_token``, another run's fenced by its newest token (its
        events under an older one would be refused anyway: dropped, as :meth:`_write`
        drops them); a run with unfenced events is left to this sink."""
        events: dict[str, tuple[NewRunEvent, ...]] = {}
        tokens: dict[str, int] = {}
        for pending_run, items in self._pending.items():
            if pending_run in self._busy:
                continue  # some are being written: these go after them
            fences = {token for _, token in items}
            if pending_run == run_id:
                if fences != {lease_token}:
                    continue
                newest = lease_token
            else:
                if None in fences:
                    continue
                newest = max(token for token in fences if token is not None)
            events[pending_run] = tuple(e for e, token in items if token == newest)
            tokens[pending_run] = newest
        for taken in events:
            self._carried[taken] = self._pending.pop(taken)
            del self._since[taken]
            self._busy.add(taken)
        return CarriedEvents(events, tokens)

    def settle(
        self, carried: CarriedEvents, written: Mapping[str, Sequence[RunEventRecord]] | None
    ) -> None:
        now = asyncio.get_running_loop().time()
        for run_id in carried.events:
            items = self._carried.pop(run_id, [])
            self._busy.discard(run_id)
            records = None if written is None else written.get(run_id, [])
            if records is None:  # the commit failed: written alone, first, at once
                if items:
                    self._pending[run_id] = items + self._pending.pop(run_id, [])
                    self._since[run_id] = min(now, self._since.get(run_id, now))
                    self._due.add(run_id)
                continue
            self.carried += len(records)
            if records and self._feed is not None:
                self._feed.notify(run_id, records[-1].seq)
            elif not records:
                log.info(
                    "run %s: %d events from this process were refused (a newer lease holds "
                    "the run)",
                    run_id,
                    len(items),
                    extra={"run_id": run_id},
                )
            if run_id not in self._pending:
                self._due.discard(run_id)
        if self._due:
            self._ready.set()
        self._arm()
        self._changed.set()

    # --- this sink's own writes ------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._flush_forever())

    async def drain(self, run_id: str | None = None) -> None:
        """Until every event emitted so far (of ``run_id``: that run's) is written (or
        refused, or given up)."""

        def waiting() -> bool:
            if run_id is None:
                return bool(self._pending or self._busy)
            return run_id in self._pending or run_id in self._busy

        while waiting():
            self._changed.clear()
            await self._changed.wait()

    async def close(self) -> None:
        self._closing = True  # a shutdown does not wait out an outage, nor a hold
        self._ready.set()
        await self.drain()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _flush_forever(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self.linger > 0:  # let the other runs' events of this moment join the write
                await asyncio.sleep(self.linger)
            batch = self._take_due()
            if not batch:  # the rest is being written (settle() arms again) or young
                self._arm()
                continue
            self._busy.update(batch)
            try:
                await self._write_batch(batch)
            finally:
                self._busy.difference_update(batch)
                if self.hold <= 0 and self._pending:
                    self._ready.set()
                self._arm()
                self._changed.set()

    def _arm(self) -> None:
        """Have ``_ready`` set when the oldest events not being written are due (if no
        such wake-up is set already)."""
        if self._timer is not None or self._ready.is_set():
            return
        wait = self._next_due()
        if wait is None:
            return
        if wait <= 0:
            self._ready.set()
            return
        self._timer = asyncio.get_running_loop().call_later(wait, self._wake_up)

    def _wake_up(self) -> None:
        self._timer = None
        self._ready.set()

    def _take_due(self) -> dict[str, list[tuple[NewRunEvent, int | None]]]:
        """The pending events of the runs not being written whose wait is over."""
        now = asyncio.get_running_loop().time()
        batch: dict[str, list[tuple[NewRunEvent, int | None]]] = {}
        for run_id, items in list(self._pending.items()):
            if run_id in self._busy:
                continue
            if self._closing or run_id in self._due or now - self._since[run_id] >= self.hold:
                batch[run_id] = items
                del self._pending[run_id]
                del self._since[run_id]
                self._due.discard(run_id)
        return batch

    def _next_due(self) -> float | None:
        """Seconds until the next run's wait is over (None: nothing waits)."""
        waiting = [
            0.0 if run_id in self._due else self._since[run_id] + self.hold
            for run_id in self._pending
            if run_id not in self._busy
        ]
        if not waiting:
            return None
        return min(waiting) - asyncio.get_running_loop().time()

    async def _write_batch(self, batch: dict[str, list[tuple[NewRunEvent, int | None]]]) -> None:
        by_run: dict[str, list[NewRunEvent]] = {}
        tokens: dict[str, int] = {}
        for run_id, items in batch.items():  # a run's newest claim fences its older events
            for _, token in items:
                if token is not None and token > tokens.get(run_id, -1):
                    tokens[run_id] = token
        for run_id, items in batch.items():
            for encoded, token in items:
                if token is None or token == tokens[run_id]:
                    by_run.setdefault(run_id, []).append(encoded)
        await self._write(by_run, tokens)

    async def _write(self, by_run: dict[str, list[NewRunEvent]], tokens: dict[str, int]) -> None:
        backoff = Backoff()
        waited = 0.0
        while True:
            try:
                written = await self._store.append_run_events_batch(by_run, lease_tokens=tokens)
                break
            except StoreUnavailableError as exc:
                if waited >= self.outage_seconds or self._closing:
                    log.error("run events lost to a store outage: %s", exc.message)
                    return
                delay = backoff.delay()
                waited += delay
                await asyncio.sleep(delay)
            except PlaitError as exc:
                log.error("cannot persist run events: %s", exc.message, extra={"code": exc.code})
                return
        for run_id, events in by_run.items():
            if events and not written.get(run_id):
                log.info(  # the run's stop is reported once, by _drive
                    "run %s: %d events from this process were refused (a newer lease "
                    "holds the run)",
                    run_id,
                    len(events),
                    extra={"run_id": run_id},
                )
        if self._feed is not None:
            for run_id, records in written.items():
                if records:
                    self._feed.notify(run_id, records[-1].seq)


class Worker:
    """Drives queued runs of one store; run as many as you like, on any machines.
    ``event_linger_seconds``: how long a run event may wait for others to share its
    write; ``event_hold_seconds``: on a store that carries events, how long a run's
    events may wait for the run's next commit to carry them (see :class:`_EventSink`)."""

    def __init__(
        self,
        *,
        service: AgentService,
        queue: RunQueue,
        encode: EventEncoder,
        concurrency: int = 4,
        poll_seconds: float = 0.2,
        grace_seconds: float = 30.0,
        feed: RunEventFeed | None = None,
        event_linger_seconds: float = 0.005,
        event_hold_seconds: float = 0.05,
        owner_alive: Callable[[str], bool | None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.service = service
        self.queue = queue
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.grace_seconds = grace_seconds
        self.stats = WorkerStats()
        self._sink = _EventSink(
            queue, encode, service.clock.now, feed, event_linger_seconds, service.lease_token
        )
        self._event_hold = event_hold_seconds
        self._draining: set[asyncio.Task[None]] = set()
        """Runs over, whose last events are still to be written (their slots are free)."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._woken: Callable[[], None] | None = None
        """Ends the wait between two polls early (while there is one: see :meth:`_sleep`)."""
        self._stopping: asyncio.Task[bool] | None = None
        """Done once the ``stop`` given to :meth:`run` is set."""
        self._backoff = Backoff()
        self._outage: StoreUnavailableError | None = None
        self._orphans: set[str] = set()
        """Runs whose driving stopped on an outage: their leases to release."""
        self._present = not queue.capabilities.presence
        """Whether this worker's presence is held (or the store has no such thing)."""
        self.presence_sweep_seconds = 0.25
        """With presence, how often the worker looks for the runs of dead workers (they
        are stale at once, not when their leases expire)."""
        self._owner_alive = None if queue.capabilities.presence else owner_alive
        """Whether a lease holder's process still runs (None: cannot tell), for a store
        without presence: the runs of a dead one are taken over before their leases
        expire."""
        self._stale: list[Run] = []
        """Stale runs the last look found while every slot was taken: recovered before
        any queued run is claimed (until the next look replaces them)."""

    @property
    def owner(self) -> str:
        return self.service.owner

    async def run(self, stop: asyncio.Event) -> WorkerStats:
        """Work until ``stop`` is set, then shut down gracefully."""
        self._sink.start()
        if self.queue.capabilities.carried_events:  # a run's commit takes its events
            cast("CarriesEvents", self.queue).attach_carrier(self._sink)
            self._sink.hold = self._event_hold
        if self.queue.capabilities.reserves_connections:  # before the first claim
            reserving = cast("ReservesConnections", self.queue)
            with contextlib.suppress(StoreUnavailableError):  # the loop says so, once
                await reserving.reserve_connections(self.concurrency + RESERVED_BEYOND_RUNS)
        next_sweep = 0.0
        clock = self.service.clock
        self._stopping = stopping = asyncio.ensure_future(stop.wait())
        log.info("worker started", extra={"worker": self.owner})
        try:
            while not stop.is_set():
                try:  # work already begun first: the runs of dead workers, of an outage
                    asked = False
                    if self._orphans:
                        await self._release_orphans()
                        next_sweep = 0.0  # recover them now
                    if not self._present:  # before any claim: see WorkerPresence
                        await cast("WorkerPresence", self.queue).hold_presence(self.owner)
                        self._present = True
                    if clock.monotonic() >= next_sweep:
                        next_sweep = clock.monotonic() + self._sweep_seconds()
                        await self._recover_stale()
                        asked = True
                    asked = await self._claim_while_free(stop) or asked
                    await self._report_depth()
                except StoreUnavailableError as exc:
                    self._store_down(exc)
                    await self._sleep(stop, self._backoff.delay())
                    continue
                if asked:  # the store answered
                    self._store_up()
                await self._sleep(stop)
        finally:
            stopping.cancel()
            await self._shut_down()
        return self.stats

    def _sweep_seconds(self) -> float:
        """How often to look for stale runs: every half lease, and with presence every
        :attr:`presence_sweep_seconds` (a dead worker's runs are stale at once)."""
        half = self.service.lease_seconds / 2
        return min(half, self.presence_sweep_seconds) if self.queue.capabilities.presence else half

    async def _claim_while_free(self, stop: asyncio.Event) -> bool:
        """Claim while there is room; whether the store was asked at all."""
        asked = False
        while self._stale and len(self._tasks) < self.concurrency and not stop.is_set():
            stale = self._stale.pop(0)
            if stale.id not in self._tasks:
                self._spawn(stale, recover=True)
        while len(self._tasks) < self.concurrency and not stop.is_set():
            run = await self._claim()
            asked = True
            if run is None:
                break
            self.stats.claimed += 1
            self._spawn(run, recover=False)
        return asked

    async def _claim(self) -> Run | ClaimedRun | None:
        """The next queued run; started in the same write when the queue can do that
        (:class:`StartingQueue`) and this worker has a model to record on it."""
        now = self.service.clock.now()
        expires_at = now + self.service.lease_seconds
        if self.queue.capabilities.starting_queue and self.service.caller.has_model:
            model = self.service.model
            return await cast("StartingQueue", self.queue).claim_and_start_run(
                owner=self.owner,
                now=now,
                expires_at=expires_at,
                model=model.name,
                model_spec=self.service.models.spec,
            )
        return await self.queue.claim_queued_run(owner=self.owner, now=now, expires_at=expires_at)

    def _store_down(self, exc: StoreUnavailableError) -> None:
        if self._outage is None:
            self.stats.outages += 1
            log.warning(
                "store unavailable: %s; retrying with backoff",
                exc.message,
                extra={"worker": self.owner, "code": exc.code},
            )
        self._outage = exc

    def _store_up(self) -> None:
        if self._outage is not None:
            log.warning("store available again; claiming", extra={"worker": self.owner})
            self._outage = None
        self._backoff.reset()

    async def _release_orphans(self) -> None:
        """Release the leases of runs an outage interrupted (the outage is over when
        this is called; it raises if it is not)."""
        for run_id in list(self._orphans):
            if run_id not in self._tasks:
                await self._release(run_id, in_outage=True)
                self._orphans.discard(run_id)

    async def _report_depth(self) -> None:
        """Telemetry's queue depth, once per poll (no query with telemetry off)."""
        telemetry = self.service.journal.telemetry
        if telemetry is None:
            return
        try:
            telemetry.queue_depth(await self.queue.count_queued_runs(now=self.service.clock.now()))
        except PlaitError as exc:
            log.warning("cannot count queued runs: %s", exc.message)

    async def _recover_stale(self) -> None:
        try:
            stale = await self.service.store.list_stale_runs(
                now=self.service.clock.now(), status=RunStatus.RUNNING
            )
        except StoreUnavailableError:
            raise
        except PlaitError as exc:
            log.error("cannot list stale runs: %s", exc.message)
            return
        self._stale = []
        for run in stale:
            if run.status is RunStatus.RUNNING and run.id not in self._tasks:
                if await self._parent_continues(run):
                    continue
                if len(self._tasks) >= self.concurrency:
                    self._stale.append(run)  # taken at the next free slot
                else:
                    self._spawn(run, recover=True)
        for run in await self._take_from_the_dead():
            if run.status is RunStatus.QUEUED:  # claimed from the queue, never started
                self.stats.claimed += 1
                self._spawn(run, recover=False)
            else:
                self._spawn(run, recover=True)

    async def _parent_continues(self, run: Run) -> bool:
        """A sub-agent's run whose parent run has not ended: the parent's recovery (or its
        resumption) continues the child, taking it over by force; recovering the child
        here as well would make two drivers of it, one fenced off mid-call."""
        if run.parent is None:
            return False
        try:
            parent = await self.service.store.get_run(run.parent.run_id)
        except StoreUnavailableError:
            raise
        except PlaitError:
            return False  # the parent is gone: the child is recovered on its own
        return not parent.status.terminal

    async def _take_from_the_dead(self) -> list[Run]:
        """Running runs, and queued ones it claimed but never started (as many as there
        are free slots), whose lease is held by a process of this host that is gone,
        leased to this worker now. The claim is made as of the dead holder's expiry, so it
        fails if any other process has claimed the run since (its lease runs later): two
        workers never take one run from each other."""
        alive = self._owner_alive
        free = self.concurrency - len(self._tasks)
        if alive is None or free <= 0:
            return []
        store = self.service.store
        now = self.service.clock.now()
        try:
            leased = await store.list_leased_runs(now=now)
        except StoreUnavailableError:
            raise
        except PlaitError as exc:
            log.error("cannot list leased runs: %s", exc.message)
            return []
        taken: list[Run] = []
        for run in leased:
            lease = run.lease
            if len(taken) == free:
                break  # the rest at the next look
            if lease is None or lease.owner == self.owner or run.id in self._tasks:
                continue
            if run.status not in (RunStatus.RUNNING, RunStatus.QUEUED):
                continue  # waiting for a person: nothing to drive
            if await self._parent_continues(run):
                continue
            if alive(lease.owner) is not False:
                continue  # running, or not of this host: its lease decides
            try:
                claimed = await store.claim_run(
                    run.id,
                    owner=self.owner,
                    now=max(now, lease.expires_at),
                    expires_at=now + self.service.lease_seconds,
                )
            except StoreUnavailableError:
                raise
            except PlaitError:  # another process took it first (or it is gone)
                continue
            log.info(
                "run taken over from %s, a process of this host that is gone",
                lease.owner,
                extra={"run_id": run.id, "session_id": run.session_id, "worker": self.owner},
            )
            taken.append(claimed)
        return taken

    async def _sleep(self, stop: asyncio.Event, seconds: float | None = None) -> None:
        """Until ``stop``, a run ends, or ``seconds`` (default: the poll interval; given,
        in an outage, only ``stop`` ends the wait early). One future, which the first of
        them resolves: no task is made per wait (a busy worker waits once per run)."""
        if stop.is_set() or self._stopping is None:
            return
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def wake(*_: object) -> None:
            if not woken.done():
                woken.set_result(None)

        timer = loop.call_later(self.poll_seconds if seconds is None else seconds, wake)
        stopping = self._stopping
        stopping.add_done_callback(wake)
        if seconds is None:
            self._woken = wake
        try:
            await woken
        finally:
            self._woken = None
            timer.cancel()
            stopping.remove_done_callback(wake)

    def _slot_freed(self) -> None:
        """A run's slot is free: a wait between polls ends now (the next claim is due)."""
        if self._woken is not None:
            self._woken()

    def _spawn(self, claimed: Run | ClaimedRun, *, recover: bool) -> None:
        task = asyncio.create_task(self._drive(claimed, recover=recover))
        run_id = claimed.run.id if isinstance(claimed, ClaimedRun) else claimed.id
        self._tasks[run_id] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._tasks.get(run_id) is task:
                del self._tasks[run_id]
            self._slot_freed()

        task.add_done_callback(done)

    async def _drive(self, claimed: Run | ClaimedRun, *, recover: bool) -> None:
        run = claimed.run if isinstance(claimed, ClaimedRun) else claimed
        ids = {"run_id": run.id, "session_id": run.session_id, "worker": self.owner}
        observer = self._sink.observer(run.id)
        on_text = self._sink.text_sink(run.id)
        try:
            if recover:
                reports = await self.service.recover(
                    run_id=run.id, observer=observer, on_text=on_text
                )
                result = reports[0].result if reports else None
                if result is None:  # another worker won it, it moved on, or it cannot be
                    if reports:  # driven here (its model cannot be opened): say which
                        log.info("run not recovered: %s", reports[0].detail, extra=ids)
                    return
                self.stats.recovered += 1
                log.info("run recovered", extra=ids)
                status = result.run.status.value
            else:
                log.info("run claimed", extra=ids)
                result = await self.service.execute(claimed, observer=observer, on_text=on_text)
                status = result.run.status.value
        except LeaseLostError as exc:
            log.warning(
                "run %s: its lease was taken over by another process; this worker stopped "
                "the run and wrote nothing after the take-over (%s)",
                run.id,
                exc.message,
                extra={**ids, "code": exc.code},
            )
            return
        except StoreUnavailableError as exc:
            self._orphans.add(run.id)
            log.warning(
                "run interrupted by a store outage; recovered once the store is back: %s",
                exc.message,
                extra={**ids, "code": exc.code},
            )
            return
        except PlaitError as exc:
            log.error("run failed in the worker: %s", exc.message, extra={**ids, "code": exc.code})
            return
        self._free(run.id)
        if not self._tasks:  # no other run's commit will carry its last events
            self._sink.finished(run.id)
        await self._sink.drain(run.id)
        self.stats.finished[status] = self.stats.finished.get(status, 0) + 1
        log.info("run %s", status, extra={**ids, "status": status})

    def _free(self, run_id: str) -> None:
        """The run is over: its slot is free while its last events wait to be written
        (inside another run's commit, or by the sink once their hold is over)."""
        task = self._tasks.pop(run_id, None)
        if task is not None:
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
        self._slot_freed()

    async def _shut_down(self) -> None:
        tasks = dict(self._tasks)
        if tasks:
            log.info("worker stopping: %d runs in flight", len(tasks))
            _, pending = await asyncio.wait(tasks.values(), timeout=self.grace_seconds)
            for run_id, task in tasks.items():
                if task in pending and not self.service.abandon(run_id):
                    task.cancel()
            for run_id, task in tasks.items():
                if task in pending:
                    with contextlib.suppress(asyncio.CancelledError, PlaitError):
                        await task
                    await self._release(run_id)
        await self._sink.close()
        if self._draining:
            await asyncio.wait(set(self._draining))
        if self.queue.capabilities.carried_events:
            cast("CarriesEvents", self.queue).detach_carrier(self._sink)
        log.info("worker stopped", extra={"worker": self.owner})

    async def _release(self, run_id: str, *, in_outage: bool = False) -> None:
        """Let the lease expire now, so another worker recovers the run at once.
        ``in_outage``: a store outage is raised, not logged (the caller retries)."""
        try:
            now = self.service.clock.now()
            await self.service.store.renew_lease(run_id, owner=self.owner, expires_at=now)
            self.stats.released += 1
            log.info("lease released", extra={"run_id": run_id, "worker": self.owner})
        except StoreUnavailableError:
            if in_outage:
                raise
            log.warning("cannot release lease: the store is unavailable", extra={"run_id": run_id})
        except PlaitError as exc:  # taken over meanwhile, or ended: nothing to release
            log.warning("cannot release lease: %s", exc.message, extra={"run_id": run_id})
