"""Retention in the JSONL store. A branch holds a copy of its prefix in its own file, so
a tombstone is written into each session file that holds the message (the retention
service expires it in every such session). The file is rewritten whole (see
:meth:`~._jsonl_sessions.SessionFiles.rewrite`): every line that carried the message now
carries its tombstone, and one ``expire`` line at the end holds the expiry records (a
line that changes nothing when replayed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plait.adapters.stores.jsonl.files import locked
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.retention import (
    check_restores,
    check_tombstones,
    decode_expiry,
    not_held,
)
from plait.adapters.stores.shared.state import SessionState
from plait.domain.messages import Message
from plait.domain.retention import Expiry, Tombstone, expiry_to_dict

__all__ = [
    "expire_line",
    "expired_in",
    "plan_expiry",
    "plan_restore",
    "read_expiries",
]


def expired_in(lines: list[dict[str, Any]], where: str) -> dict[str, Expiry]:
    out: dict[str, Expiry] = {}
    for line in lines:
        if line.get("op") == "expire":
            for record in line.get("expired", ()):
                expiry = decode_expiry(record, where)
                out[expiry.message_id] = expiry
    return out


def expire_line(expiries: Sequence[Expiry]) -> dict[str, Any]:
    return {
        "schema_version": codec.SCHEMA_VERSION,
        "op": "expire",
        "expired": [expiry_to_dict(e) for e in expiries],
    }


Plan = Callable[[SessionState, list[dict[str, Any]]], tuple[bool, list[str]]]
"""What :meth:`~._jsonl_sessions.SessionFiles.rewrite` runs on the caught-up file."""


def plan_expiry(tombstones: Sequence[Tombstone], where: str) -> Plan:
    check_tombstones(tombstones)

    def plan(state: SessionState, lines: list[dict[str, Any]]) -> tuple[bool, list[str]]:
        for tombstone in tombstones:
            if tombstone.message.id not in state.message_ids:
                raise not_held(state.session.id, tombstone.message.id)
        done = expired_in(lines, where)
        todo = {
            tombstone.message.id: tombstone
            for tombstone in tombstones
            if tombstone.message.id not in done
        }
        if not todo:
            return False, []
        for line in lines:
            for item in line.get("messages", ()):
                found = todo.get(item["message"]["id"])
                if found is not None:
                    item["message"] = codec.message_to_dict(found.message)
        lines.append(expire_line([tombstone.expiry for tombstone in todo.values()]))
        return True, list(todo)

    return plan


def plan_restore(messages: Sequence[Message], where: str) -> Plan:
    """Originals back in every line, their records out of the ``expire`` lines."""
    check_restores(messages)

    def plan(state: SessionState, lines: list[dict[str, Any]]) -> tuple[bool, list[str]]:
        for message in messages:
            if message.id not in state.message_ids:
                raise not_held(state.session.id, message.id)
        expired = expired_in(lines, where)
        todo = {message.id: message for message in messages if message.id in expired}
        if not todo:
            return False, []
        kept: list[dict[str, Any]] = []
        for line in lines:
            for item in line.get("messages", ()):
                found = todo.get(item["message"]["id"])
                if found is not None:
                    item["message"] = codec.message_to_dict(found)
            if line.get("op") == "expire":
                line["expired"] = [r for r in line["expired"] if r["message_id"] not in todo]
                if not line["expired"]:
                    continue
            kept.append(line)
        lines[:] = kept
        return True, list(todo)

    return plan


def read_expiries(path: Path) -> dict[str, Expiry]:
    """The expiry records of a session file (its session is known to exist)."""
    with locked(path, write=False) as fd, open(fd, "rb", closefd=False) as file:
        data = file.read()
    complete = data[: data.rfind(b"\n") + 1]  # a torn last line is not a record yet
    lines = [codec.loads(raw.decode()) for raw in complete.splitlines()]
    return expired_in([x for x in lines if isinstance(x, dict)], str(path))
