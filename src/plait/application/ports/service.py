"""Ports of service mode (``plait serve`` and its workers): the run queue and run events,
webhooks and their delivery, API keys. A process driving one run never imports them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from plait.domain.record import record

if TYPE_CHECKING:
    from plait.application.ports.stores import (
        StoreCapabilities,
    )
    from plait.domain.runs import Run
    from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
    from plait.domain.webhooks import (
        Delivery,
        DeliveryAttempt,
        DeliveryJob,
        DeliveryStatus,
        Endpoint,
    )

__all__ = [
    "CarriedEvents",
    "CarriesEvents",
    "EventCarrier",
    "KeyStore",
    "ReservesConnections",
    "RunQueue",
    "WebhookSender",
    "WebhookStore",
]


class RunQueue(Protocol):
    """Queued runs and their persisted events (service mode, docs/design.md#surfaces).

    A queued run is stored by :meth:`RunStore.start_run` with status ``queued`` and
    no lease; a worker takes it with :meth:`claim_queued_run`.
    """

    @property
    def capabilities(self) -> StoreCapabilities:
        """The store's (``starting_queue``: it also claims and starts in one write)."""
        ...

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        """Lease the oldest ``queued`` run that is free (no lease, or an expired one) to
        ``owner``, atomically (two workers never get the same run), with a new lease
        token (as :meth:`LeaseStore.claim_run`); ``None`` if none."""
        ...

    async def count_queued_runs(self, *, now: float) -> int:
        """How many ``queued`` runs no worker holds a live lease on at ``now`` (the
        queue's depth, for telemetry): a run claimed by :meth:`claim_queued_run` stays
        ``queued`` until its worker starts it, and is not counted."""
        ...

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent], *, lease_token: int | None = None
    ) -> list[RunEventRecord]:
        """Number the events after the run's last one (``seq`` from 1, no gaps) and store
        them in one write. ``lease_token``: the writer's token (see :class:`Commit`); a
        stale one is refused with :class:`~plait.domain.errors.LeaseLostError`, nothing
        written."""
        ...

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        """Events with ``seq > after`` in order (an unknown run has none)."""
        ...

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        """:meth:`append_run_events` for several runs in one durable write (a worker
        flushes the events of every run it drives at once). A run whose token in
        ``lease_tokens`` is stale gets none of its events written (an empty list back);
        the other runs' are written."""
        ...


@record
class CarriedEvents:
    """Run events a commit takes from an :class:`EventCarrier`: per run, in order, with
    the lease token each run's are fenced by."""

    events: Mapping[str, tuple[NewRunEvent, ...]]
    tokens: Mapping[str, int]

    def __bool__(self) -> bool:
        return bool(self.events)


class EventCarrier(Protocol):
    """Run events waiting to be written (a worker's), which a store that can
    (:class:`CarriesEvents`) writes inside a commit of one of the worker's runs: one
    transaction, one durable point for the step and the events emitted meanwhile."""

    def take(self, run_id: str, lease_token: int) -> CarriedEvents:
        """For a commit of ``run_id`` fenced by ``lease_token``: the events that are
        neither written nor being written, of that run (if every one was emitted under
        ``lease_token``) and of the carrier's other runs (each fenced by its own token: a
        run claimed since gets none written). Once a run's are taken, its later events
        wait for :meth:`settle` (they are numbered after these); nothing taken, nothing
        held."""
        ...

    def settle(
        self, carried: CarriedEvents, written: Mapping[str, Sequence[RunEventRecord]] | None
    ) -> None:
        """The commit that carried ``carried`` landed (``written``: per run, the events as
        numbered and written; none for a run fenced off) or failed (``None``: nothing of
        them was written; they are written on their own, as if never taken)."""
        ...


class CarriesEvents(Protocol):
    """A store that writes pending run events inside the commits of runs (see
    :class:`EventCarrier`): only commits fenced by a lease token carry any."""

    def attach_carrier(self, carrier: EventCarrier) -> None:
        """From now on, each commit of a run fenced by a lease token takes what
        ``carrier`` gives for it (:meth:`EventCarrier.take`)."""
        ...

    def detach_carrier(self, carrier: EventCarrier) -> None: ...


class ReservesConnections(Protocol):
    """A store whose calls take connections from a pool that grows as they are asked for
    (one at a time, each request waiting while one opens): a worker reserves what its
    runs will use before its first claim, so its first runs do not wait for them."""

    async def reserve_connections(self, count: int) -> None:
        """Keep at least ``count`` connections open from now on (at most the store's
        maximum), opening the missing ones now, together, and making them ready for a
        worker's statements (what the server compiles or plans at a connection's first
        uses, done here; nothing written is kept). Returns once they are open and ready,
        or after a few seconds (one that could not open then opens at its first use)."""
        ...


class WebhookStore(Protocol):
    """Webhook endpoints and their outbox (see :mod:`plait.domain.webhooks`). The store
    writes an event and its deliveries in the same transaction as the state change the
    event announces; these methods register endpoints and move deliveries along."""

    async def add_webhook(self, endpoint: Endpoint) -> None: ...

    async def put_webhook(self, endpoint: Endpoint) -> None:
        """Add, or update the url, events, secret and principal of the endpoint with that
        id, keeping its status, failures and deliveries (endpoints of the config)."""
        ...

    async def list_webhooks(self, *, principal: str | None = None) -> list[Endpoint]:
        """Every endpoint, or those registered by ``principal``."""
        ...

    async def get_webhook(self, endpoint_id: str) -> Endpoint:
        """Raises :class:`~plait.domain.errors.WebhookNotFoundError`."""
        ...

    async def remove_webhook(self, endpoint_id: str) -> None:
        """The endpoint and its deliveries; raises ``WebhookNotFoundError``."""
        ...

    async def resume_webhook(self, endpoint_id: str, *, now: float) -> Endpoint:
        """Active again, failure count reset, its pending deliveries due ``now``."""
        ...

    async def list_deliveries(
        self,
        *,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        """Newest first; ``principal``: of that principal's endpoints only."""
        ...

    async def claim_deliveries(
        self, *, owner: str, now: float, expires_at: float, limit: int
    ) -> list[DeliveryJob]:
        """Lease up to ``limit`` due pending deliveries of active endpoints to ``owner``
        until ``expires_at`` (counting an attempt); one whose lease expired (its worker
        died mid-delivery) is due again. Two claimers never get the same delivery."""
        ...

    async def finish_delivery(self, attempt: DeliveryAttempt) -> None:
        """Record an attempt: delivered, or due again at ``retry_at`` (``None``: failed
        for good); the endpoint is paused after ``pause_after`` consecutive failures. A
        delivery no longer pending (another worker delivered it after this one's lease
        expired) is left as it is."""
        ...


class KeyStore(Protocol):
    """API keys, stored by their SHA-256 only."""

    async def add_api_key(self, key: ApiKey) -> None: ...

    async def find_api_key(self, key_hash: str) -> ApiKey | None: ...


class WebhookSender(Protocol):
    """POSTs one signed delivery; returns the HTTP status, raises ``OSError`` (or a
    subclass) when nothing came back (refused, reset, timed out). ``public_only``: the
    endpoint is a principal's, which may only reach public addresses (unless the
    deployment allows private networks)."""

    async def post(
        self, url: str, *, body: str, headers: Mapping[str, str], public_only: bool = False
    ) -> int: ...
