"""Rows of the service-mode tables (run events, API keys), shared by the SQL stores, and
the in-memory book the memory store keeps them in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from plait.domain.errors import ConflictError, CorruptStoreError
from plait.domain.service import ApiKey, EventType, NewRunEvent, Role, RunEventRecord

__all__ = [
    "ServiceBook",
    "duplicate_key",
    "event_from_row",
    "event_row",
    "key_from_row",
    "key_row",
]


def event_row(run_id: str, seq: int, event: NewRunEvent) -> tuple[Any, ...]:
    data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
    return (run_id, seq, event.type.value, event.at, data)


def event_from_row(row: Sequence[Any]) -> RunEventRecord:
    run_id, seq, type_, at, data = row
    try:
        return RunEventRecord(
            run_id=run_id, seq=int(seq), type=EventType(type_), at=float(at), data=json.loads(data)
        )
    except ValueError as error:
        raise CorruptStoreError(f"event {seq} of run {run_id!r} is malformed: {error}") from error


def key_row(key: ApiKey) -> tuple[Any, ...]:
    return (key.id, key.principal, key.role.value, key.key_hash, key.created_at)


def key_from_row(row: Sequence[Any]) -> ApiKey:
    kid, principal, role, key_hash, created_at = row
    return ApiKey(
        id=kid, principal=principal, role=Role(role), key_hash=key_hash, created_at=created_at
    )


def duplicate_key(key_id: str) -> ConflictError:
    return ConflictError(f"API key {key_id!r} already exists", key_id=key_id)


class ServiceBook:
    """Events and keys of the memory store (the caller holds its lock)."""

    def __init__(self) -> None:
        self.events: dict[str, list[RunEventRecord]] = {}
        self.keys: dict[str, ApiKey] = {}

    def append(self, run_id: str, events: Sequence[NewRunEvent]) -> list[RunEventRecord]:
        log = self.events.setdefault(run_id, [])
        new = [
            RunEventRecord(run_id=run_id, seq=len(log) + i, type=e.type, at=e.at, data=e.data)
            for i, e in enumerate(events, 1)
        ]
        log.extend(new)
        return new

    def read(self, run_id: str, after: int, limit: int | None) -> list[RunEventRecord]:
        log = self.events.get(run_id, [])[max(after, 0) :]
        return log if limit is None else log[: max(limit, 0)]

    def add_key(self, key: ApiKey) -> None:
        if key.id in self.keys or any(k.key_hash == key.key_hash for k in self.keys.values()):
            raise duplicate_key(key.id)
        self.keys[key.id] = key

    def find_key(self, key_hash: str) -> ApiKey | None:
        return next((k for k in self.keys.values() if k.key_hash == key_hash), None)
