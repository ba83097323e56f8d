"""Summary storage: the v1 shape keeps loading; corrupt or newer data is refused clearly
and nothing is changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.shared.summary_codec import summary_from_dict, summary_to_dict
from plait.domain.errors import CorruptStoreError
from tests.compaction.conftest import run
from tests.contract.base import started
from tests.contract.summary_contract import history, summary

FIXTURE = Path(__file__).parent / "fixtures" / "v1_summary.json"


def test_the_v1_summary_shape_loads() -> None:
    data = json.loads(FIXTURE.read_text())
    assert data["schema_version"] == 1
    assert summary_from_dict(data) == summary(4)
    assert summary_to_dict(summary_from_dict(data)) == data


def test_a_newer_or_malformed_summary_is_refused() -> None:
    data = json.loads(FIXTURE.read_text())
    with pytest.raises(CorruptStoreError, match="newer than this plait"):
        summary_from_dict(data | {"schema_version": 2})
    with pytest.raises(CorruptStoreError, match="malformed"):
        summary_from_dict({k: v for k, v in data.items() if k != "goal"})


def test_jsonl_corrupt_summary_line_is_reported_and_left_alone(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        await started(store, *history())
        await store.activate_summary(summary(4), expected_generation=0)
        path = tmp_path / "store" / "summaries" / "s1.jsonl"
        path.write_bytes(path.read_bytes() + b"{not json}\n")
        before = path.read_bytes()
        with pytest.raises(CorruptStoreError, match="line 2"):
            await store.get_summary("s1")
        with pytest.raises(CorruptStoreError):
            await store.activate_summary(summary(5, 2), expected_generation=1)
        assert path.read_bytes() == before

    run(go())


def test_jsonl_torn_last_line_is_ignored_then_cut(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        await started(store, *history())
        first = summary(4)
        await store.activate_summary(first, expected_generation=0)
        path = tmp_path / "store" / "summaries" / "s1.jsonl"
        path.write_bytes(path.read_bytes() + b'{"schema_version": 1, "op": "summ')
        assert await store.get_summary("s1") == first
        second = summary(5, 2)
        await store.activate_summary(second, expected_generation=1)
        assert await store.list_summaries("s1") == [first, second]
        assert path.read_bytes().count(b"\n") == 2

    run(go())
