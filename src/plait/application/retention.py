"""Applying a raw-history retention policy (:mod:`plait.domain.retention`).

A message is expired only if it is older than the policy's age and *every* session that
holds it (the session where it was written and every branch whose fork point is at or
after it, branches of branches included) has an active summary covering it, so no model
loses something it was never given a summary of; ``force`` drops the summary rule (the
docs say what that costs). A session with a live run (queued, running or waiting) is
never touched, nor any message it holds. In ``archive`` mode the originals are written to
one archive artifact before any body is replaced, so a crash in between loses nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from plait.application.expiries import expiries_of
from plait.application.ports import Clock
from plait.domain.errors import ValidationError
from plait.domain.messages import Message, MessageKind
from plait.domain.record import record
from plait.domain.retention import (
    RETENTION_MODES,
    SECONDS_PER_DAY,
    Expiry,
    RetentionMode,
    Tombstone,
    archive_digest,
    body_digest,
    check_days,
    message_from_archive,
    message_to_archive,
    tombstone,
)
from plait.domain.session import Session

__all__ = [
    "ARCHIVE_MEDIA_TYPE",
    "ExpiredItem",
    "HeldBack",
    "RestoreReport",
    "RetentionReport",
    "RetentionRequest",
    "RetentionService",
    "expiries_of",
]

ARCHIVE_MEDIA_TYPE = "application/vnd.plait.history-archive+json"
ARCHIVE_VERSION = 1


@record(kw_only=True)
class RetentionRequest:
    older_than_days: float
    mode: RetentionMode = "expire"
    session_id: str | None = None
    """Only the messages this session holds (shared bodies are expired for every
    session holding them); ``None``: every session."""
    force: bool = False
    """Expire old messages even where no active summary covers them."""
    dry_run: bool = False


@record(kw_only=True)
class ExpiredItem:
    session_id: str
    """The session where the message was written."""
    seq: int
    message_id: str
    kind: MessageKind
    created_at: float
    held_by: tuple[str, ...]
    """Every session that holds the message (it was written in the first; the others
    are branches)."""


@record(kw_only=True)
class HeldBack:
    reason: str
    messages: int


@record(kw_only=True)
class RetentionReport:
    policy: str
    mode: RetentionMode
    cutoff: float
    """Messages created before this time (epoch seconds) were considered."""
    dry_run: bool
    expired: tuple[ExpiredItem, ...]
    """What was expired (with ``dry_run``: what would be)."""
    held_back: tuple[HeldBack, ...]
    """Old messages left alone, counted by reason."""
    archive_id: str | None = None


@record(kw_only=True)
class RestoreReport:
    archive_id: str
    dry_run: bool
    restored: tuple[ExpiredItem, ...]
    """The messages put back (with ``dry_run``: that would be), with every session
    holding them."""
    held_back: tuple[HeldBack, ...]
    """Archived messages not restored, counted by reason."""


@dataclass(slots=True)
class _Tree:
    sessions: dict[str, Session]
    parent: dict[str, tuple[str, int]]
    """branch id -> (source session id, fork point seq)."""
    children: dict[str, list[tuple[str, int]]]
    covered: dict[str, int]

    def origin(self, session_id: str, seq: int) -> str:
        """The session where the message at ``seq`` of ``session_id`` was written."""
        while (link := self.parent.get(session_id)) is not None and link[1] >= seq:
            session_id = link[0]
        return session_id

    def holders(self, origin: str, seq: int) -> list[str]:
        out = [origin]
        for child, through in self.children.get(origin, ()):
            if through >= seq:
                out += self.holders(child, seq)
        return out


class RetentionService:
    """Expires or archives old raw history by policy. ``store`` is a
    :class:`~plait.application.ports.SessionStore`,
    :class:`~plait.application.ports.ForkStore`,
    :class:`~plait.application.ports.SummaryStore`,
    :class:`~plait.application.ports.RetentionStore` and
    :class:`~plait.application.ports.ArtifactStore`."""

    def __init__(self, *, store: Any, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def _tree(self) -> _Tree:
        sessions = {s.id: s for s in await self._store.list_sessions()}
        parent: dict[str, tuple[str, int]] = {}
        children: dict[str, list[tuple[str, int]]] = {}
        covered: dict[str, int] = {}
        for sid, session in sessions.items():
            summary = await self._store.get_summary(sid)
            covered[sid] = 0 if summary is None else summary.covered_through_seq
            if session.fork_origin is None:
                continue
            record = await self._store.get_fork_record(sid)
            if record is not None:
                parent[sid] = (record.source_session_id, record.through_seq)
                children.setdefault(record.source_session_id, []).append((sid, record.through_seq))
        return _Tree(sessions, parent, children, covered)

    async def apply(self, request: RetentionRequest) -> RetentionReport:
        days = check_days(request.older_than_days)
        if request.mode not in RETENTION_MODES:
            raise ValidationError(
                f"retention mode must be 'expire' or 'archive', got {request.mode!r}",
                field="mode",
            )
        now = self._clock.now()
        cutoff = now - days * SECONDS_PER_DAY
        policy = f"raw_history_days={days:g}" + (", forced" if request.force else "")
        tree = await self._tree()
        if request.session_id is not None:
            scope = [(await self._store.get_session(request.session_id)).id]
        else:
            scope = list(tree.sessions)
        chosen: dict[tuple[str, int], tuple[Message, list[str]]] = {}
        held = Counter[str]()
        seen: set[tuple[str, int]] = set()
        for sid in scope:
            expired = await self._store.expiries(sid)
            for sm in await self._store.read_messages(sid):
                message = sm.message
                if message.created_at >= cutoff or message.id in expired:
                    continue
                origin = tree.origin(sid, sm.seq)
                if (origin, sm.seq) in seen:  # a shared body, met in another session
                    continue
                seen.add((origin, sm.seq))
                first, *branches = tree.holders(origin, sm.seq)
                holders = [first, *sorted(branches)]
                reason = self._reason(tree, holders, sm.seq, request.force)
                if reason is not None:
                    held[reason] += 1
                    continue
                chosen[(origin, sm.seq)] = (message, holders)
        items = tuple(
            ExpiredItem(
                session_id=origin,
                seq=seq,
                message_id=message.id,
                kind=message.kind,
                created_at=message.created_at,
                held_by=tuple(holders),
            )
            for (origin, seq), (message, holders) in sorted(
                chosen.items(), key=lambda entry: entry[0]
            )
        )
        report = RetentionReport(
            policy=policy,
            mode=request.mode,
            cutoff=cutoff,
            dry_run=request.dry_run,
            expired=items,
            held_back=tuple(HeldBack(reason=r, messages=n) for r, n in sorted(held.items())),
        )
        if request.dry_run or not items:
            return report
        archive_id = None
        if request.mode == "archive":
            archive_id = await self._archive(chosen, policy, now)
        per_holder: dict[str, list[Tombstone]] = {}
        for (_origin, _seq), (message, holders) in chosen.items():
            stone = tombstone(
                message, expired_at=now, policy=policy, mode=request.mode, archive_id=archive_id
            )
            for holder in holders:
                per_holder.setdefault(holder, []).append(stone)
        # Sessions where messages were written come first: on stores that share bodies
        # the branches' calls then find them expired already.
        for holder in sorted(per_holder, key=lambda sid: sid in tree.parent):
            await self._store.expire_messages(holder, per_holder[holder])
        return RetentionReport(
            policy=report.policy,
            mode=report.mode,
            cutoff=report.cutoff,
            dry_run=False,
            expired=report.expired,
            held_back=report.held_back,
            archive_id=archive_id,
        )

    @staticmethod
    def _reason(tree: _Tree, holders: list[str], seq: int, force: bool) -> str | None:
        for holder in holders:
            session = tree.sessions.get(holder)
            if session is not None and session.active_run_id is not None:
                return f"session {holder} has a live run ({session.active_run_id})"
        if force:
            return None
        for holder in holders:
            if tree.covered.get(holder, 0) < seq:
                return f"not covered by an active summary of session {holder}"
        return None

    async def restore(self, archive_id: str, *, dry_run: bool = False) -> RestoreReport:
        """Put the originals of an archive back where they were expired, in every session
        that holds their tombstones now (branches made since included). Each original
        must match the digest its tombstone keeps; one that is not expired any more, or
        was expired by another archive, is left alone."""
        ref, data = await self._store.get_artifact(archive_id)
        try:
            if ref.media_type != ARCHIVE_MEDIA_TYPE:
                raise ValueError(f"its media type is {ref.media_type!r}")
            document = json.loads(data)
            if document.get("schema_version") != ARCHIVE_VERSION:
                raise ValueError(f"unknown schema_version {document.get('schema_version')!r}")
            entries = [
                (str(exc["session_id"]), int(exc["seq"]), str(exc["digest"]), exc["message"])
                for exc in document["messages"]
            ]
            originals = [message_from_archive(m) for *_, m in entries]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(
                f"artifact {archive_id!r} is not a plait history archive ({exc})",
                artifact_id=archive_id,
            ) from exc
        tree = await self._tree()
        held = Counter[str]()
        items: list[ExpiredItem] = []
        per_holder: dict[str, list[Message]] = {}
        records: dict[str, dict[str, Expiry]] = {}
        for (origin, seq, digest, data), original in zip(entries, originals, strict=True):
            if archive_digest(data) != digest:
                held["the archived copy does not match its digest"] += 1
                continue
            if origin not in tree.sessions:
                held[f"session {origin} no longer exists"] += 1
                continue
            holders = tree.holders(origin, seq)
            mine = []
            for holder in holders:
                if holder not in records:
                    records[holder] = await self._store.expiries(holder)
                record = records[holder].get(original.id)
                if (
                    record is not None
                    and record.digest == digest
                    and record.archive_id == archive_id
                ):
                    mine.append(holder)
            if not mine:
                held["not expired by this archive (restored already?)"] += 1
                continue
            for holder in mine:
                per_holder.setdefault(holder, []).append(original)
            first, *branches = mine
            items.append(
                ExpiredItem(
                    session_id=first,
                    seq=seq,
                    message_id=original.id,
                    kind=original.kind,
                    created_at=original.created_at,
                    held_by=(first, *sorted(branches)),
                )
            )
        if not dry_run:
            for holder in sorted(per_holder, key=lambda sid: sid in tree.parent):
                await self._store.restore_messages(holder, per_holder[holder])
        return RestoreReport(
            archive_id=archive_id,
            dry_run=dry_run,
            restored=tuple(items),
            held_back=tuple(HeldBack(reason=r, messages=n) for r, n in sorted(held.items())),
        )

    async def _archive(
        self, chosen: dict[tuple[str, int], tuple[Message, list[str]]], policy: str, now: float
    ) -> str:
        document = {
            "schema_version": ARCHIVE_VERSION,
            "policy": policy,
            "archived_at": now,
            "messages": [
                {
                    "session_id": origin,
                    "seq": seq,
                    "held_by": holders,
                    "digest": body_digest(m),
                    "message": message_to_archive(m),
                }
                for (origin, seq), (m, holders) in sorted(
                    chosen.items(), key=lambda entry: entry[0]
                )
            ],
        }
        data = json.dumps(document, ensure_ascii=False, sort_keys=True).encode()
        ref = await self._store.put_artifact(data, media_type=ARCHIVE_MEDIA_TYPE)
        return str(ref.id)
