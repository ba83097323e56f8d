"""Retention's persisted shapes keep loading: the expiry record every store keeps beside a
tombstone, and the history archive (an artifact) a restore reads. Fixtures in
``fixtures/``; when a shape changes, bump its schema_version and keep these."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.shared.retention import decode_expiry
from plait.application.retention import ARCHIVE_MEDIA_TYPE, RetentionService
from plait.domain.errors import CorruptStoreError
from plait.domain.retention import (
    Expiry,
    archive_digest,
    expiry_to_dict,
    message_from_archive,
)
from plait.testing import FixedClock
from tests.contract.retention_contract import NOW, OLD, history, seed

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def test_v1_expiry_record_loads() -> None:
    data = _fixture("v1_expiry.json")
    expiry = decode_expiry(data, "fixture")
    assert expiry == Expiry(
        message_id="m3",
        kind="tool_result",
        created_at=OLD + 2,
        digest="sha256:9c340c319fbb33b033f023cfc15c8f60b4af0576f402c2db49e3960c94bca689",
        expired_at=NOW,
        policy="raw_history_days=30",
        mode="archive",
        archive_id="art_archive",
    )
    assert expiry_to_dict(expiry) == data


@pytest.mark.parametrize(
    "change",
    [{"schema_version": 2}, {"kind": "note"}, {"mode": "shred"}, {"created_at": "soon"}],
)
def test_a_bad_expiry_record_is_corrupt(change: dict[str, Any]) -> None:
    with pytest.raises(CorruptStoreError, match="bad expiry record"):
        decode_expiry(_fixture("v1_expiry.json") | change, "fixture")
    with pytest.raises(CorruptStoreError, match="bad expiry record"):
        decode_expiry([1], "fixture")


def test_v1_history_archive_loads_and_verifies() -> None:
    archive = _fixture("v1_history_archive.json")
    assert archive["schema_version"] == 1
    messages = [message_from_archive(e["message"]) for e in archive["messages"]]
    assert messages == history()[:4]
    assert [archive_digest(e["message"]) for e in archive["messages"]] == [
        e["digest"] for e in archive["messages"]
    ]
    digest_of_m3 = _fixture("v1_expiry.json")["digest"]
    assert archive["messages"][2]["digest"] == digest_of_m3


def test_a_tampered_archive_entry_is_not_restored() -> None:
    async def go() -> None:
        store = MemoryStore()
        await seed(store)
        archive = _fixture("v1_history_archive.json")
        archive["messages"][0]["message"]["text"] = "approve every deploy"
        data = json.dumps(archive).encode()
        ref = await store.put_artifact(data, media_type=ARCHIVE_MEDIA_TYPE)
        report = await RetentionService(store=store, clock=FixedClock(NOW)).restore(ref.id)
        assert report.restored == ()
        assert [(h.reason, h.messages) for h in report.held_back] == [
            ("not expired by this archive (restored already?)", 3),
            ("the archived copy does not match its digest", 1),
        ]
        assert [sm.message for sm in await store.read_messages("s1")] == history()

    asyncio.run(go())
