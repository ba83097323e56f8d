"""Retention support shared by the stores (:class:`~plait.application.ports.RetentionStore`):
checks, the expiry record's codec, and the in-memory session model's replacement of bodies
(memory and JSONL stores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from plait.adapters.stores.shared.state import SessionState
from plait.domain.errors import ConfigError, CorruptStoreError, MessageNotFoundError
from plait.domain.messages import Message
from plait.domain.retention import Expiry, Tombstone, expiry_from_dict
from plait.domain.session import StoredMessage

__all__ = [
    "check_restores",
    "check_tombstones",
    "decode_expiry",
    "not_held",
    "replace_bodies",
]


def not_held(session_id: str, message_id: str) -> MessageNotFoundError:
    return MessageNotFoundError(
        f"session {session_id!r} holds no message {message_id!r}; nothing was expired",
        session_id=session_id,
        message_id=message_id,
    )


def check_tombstones(tombstones: Sequence[Tombstone]) -> None:
    """Misuse checks that need no stored state."""
    seen: set[str] = set()
    for tombstone in tombstones:
        mid = tombstone.message.id
        if (
            tombstone.expiry.message_id != mid
            or tombstone.expiry.kind != tombstone.message.kind
            or mid in seen
        ):
            raise ConfigError(
                f"tombstone of message {mid!r}: its record names another message or repeats one",
                message_id=mid,
            )
        seen.add(mid)


def check_restores(messages: Sequence[Message]) -> None:
    ids = [m.id for m in messages]
    if len(set(ids)) != len(ids):
        raise ConfigError("a restore repeats a message", message_ids=ids)


def decode_expiry(data: Any, where: str) -> Expiry:
    try:
        if not isinstance(data, dict):
            raise TypeError(f"not a JSON object: {type(data).__name__}")
        return expiry_from_dict(data)
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptStoreError(f"{where}: bad expiry record ({error})") from error


def replace_bodies(
    state: SessionState,
    bodies: Sequence[Message],
    skip: Callable[[Message], bool],
) -> list[tuple[StoredMessage, Message]]:
    """Plan, then apply, the replacement of message bodies (tombstones, or originals being
    restored) in one session's state: ``[(old stored message, new body)]`` for those
    replaced, leaving the messages ``skip`` names. Nothing changes if one is not held."""
    sid = state.session.id
    for body in bodies:
        if body.id not in state.message_ids:
            raise not_held(sid, body.id)
    wanted = {body.id: body for body in bodies}
    done: list[tuple[StoredMessage, Message]] = []
    for index, sm in enumerate(state.messages):
        found = wanted.get(sm.message.id)
        if found is None or skip(sm.message):
            continue
        done.append((sm, found))
        # The branch's list is a copy of the source's, so this changes only this state.
        state.messages[index] = StoredMessage(sm.seq, found)
    return done
