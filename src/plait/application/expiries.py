"""Which messages of a session retention expired: what the recall tool, the read side and
the API ask before serving a message. Apart from :mod:`plait.application.retention` (the
service that expires them), so a runtime that only reads does not import that service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.domain.retention import Expiry

__all__ = ["expiries_of"]


async def expiries_of(store: Any, session_id: str) -> dict[str, Expiry]:
    """The session's expiry records, by message id (none on a store without retention)."""
    if not store.capabilities.retention:
        return {}
    found: dict[str, Expiry] = await store.expiries(session_id)
    return found
