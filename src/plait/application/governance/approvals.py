"""A person's answers to calls that wait for one (docs/design.md#governance): recording the
decision. Reading them is :meth:`plait.application.queries.Queries.list_approvals`; what happens to
the waiting run afterwards (it continues here, or goes back to a worker's queue) is
:class:`plait.application.approvals.ApprovalDesk`, which every surface goes through."""

from __future__ import annotations

from plait.application.ports import ApprovalStore, Clock, SessionStore
from plait.domain.errors import ConfigError
from plait.domain.governance import Approval

__all__ = ["Approvals"]


class Approvals:
    """Approve or deny a pending request, at the clock's time."""

    def __init__(self, store: SessionStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def store(self) -> ApprovalStore:
        """The store's approvals; a ConfigError when the store keeps none."""
        if not self._store.capabilities.approvals:
            raise ConfigError(f"the store {self._store!r} keeps no approvals")
        return self._store  # type: ignore[return-value]

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        """Approve (for ``ttl_seconds`` from now) or deny (``reason`` is what the model
        is told) a pending request; anything else is a RunStateError."""
        return await self.store().decide_approval(
            approval_id,
            approve=approve,
            grantor=grantor,
            at=self._clock.now(),
            ttl_seconds=ttl_seconds,
            reason=reason,
        )

    async def approve(self, approval_id: str, *, grantor: str, ttl_seconds: float) -> Approval:
        """Allow exactly the call the request names, for ``ttl_seconds`` from now."""
        return await self.decide(
            approval_id, approve=True, grantor=grantor, ttl_seconds=ttl_seconds
        )

    async def deny(self, approval_id: str, *, grantor: str, reason: str) -> Approval:
        """Refuse the call; ``reason`` is what the model is told."""
        return await self.decide(approval_id, approve=False, grantor=grantor, reason=reason)
