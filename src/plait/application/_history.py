"""What a run starting or resuming reads of its session: the session and its history."""

from __future__ import annotations

from typing import cast

from plait.application.ports import HistoryRead, SessionStore
from plait.domain.messages import Message
from plait.domain.session import Session

__all__ = ["session_history"]


async def session_history(store: SessionStore, session_id: str) -> tuple[Session, list[Message]]:
    """The session and its whole history: in one read (one snapshot, no seq per message)
    from a store that offers it (:class:`~plait.application.ports.HistoryRead`), else
    with two."""
    if store.capabilities.history_read:
        return await cast(HistoryRead, store).read_history(session_id)
    session = await store.get_session(session_id)
    return session, [stored.message for stored in await store.read_messages(session_id)]
