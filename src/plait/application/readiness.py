"""Port of a store that can tell whether it commits right now (``GET /v1/ready``).

A store that offers :class:`CommitProbe` answers readiness with a real check (a recent
commit's outcome and a probe commit; see the SQLite and PostgreSQL stores); any other
store is ready when it answers a read.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["CommitProbe"]


@runtime_checkable
class CommitProbe(Protocol):
    async def check_writable(self) -> None:
        """Return if the store can commit now; else raise
        :class:`~plait.domain.errors.StoreUnavailableError` saying why."""
        ...
