"""A person's answers to calls that wait for one (DESIGN §5): the write side of approvals
for a run that a person resumes (``plait approvals approve``, then ``plait runs resume``).
Reading them is :meth:`plait.application.queries.Queries.list_approvals`; in service mode
:class:`plait.application.approvals.ApprovalDesk` also puts the run back in the queue."""

from __future__ import annotations

from plait.application.ports import ApprovalStore, Clock
from plait.domain.errors import ConfigError
from plait.domain.governance import Approval

__all__ = ["Approvals"]


class Approvals:
    """Approve or deny a pending request; the waiting run continues with
    :meth:`~plait.application.service.AgentService.resume`."""

    def __init__(self, store: object, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def _approvals(self) -> ApprovalStore:
        if not hasattr(self._store, "decide_approval"):
            raise ConfigError(f"the store {self._store!r} keeps no approvals")
        return self._store  # type: ignore[return-value]

    async def approve(self, approval_id: str, *, grantor: str, ttl_seconds: float) -> Approval:
        """Allow exactly the call the request names, for ``ttl_seconds`` from now."""
        return await self._approvals().decide_approval(
            approval_id, approve=True, grantor=grantor, at=self._clock.now(),
            ttl_seconds=ttl_seconds,
        )  # fmt: skip

    async def deny(self, approval_id: str, *, grantor: str, reason: str) -> Approval:
        """Refuse the call; ``reason`` is what the model is told."""
        return await self._approvals().decide_approval(
            approval_id, approve=False, grantor=grantor, at=self._clock.now(), reason=reason
        )
