"""run_command through the application's ToolRunner: the model's view stays within the
cap and the spooled output becomes an artifact holding all of it."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.tool_runner import ToolRunner
from plait.domain.messages import ToolResult, ToolStatus
from plait.domain.tools import EffectClass
from tests.sandbox.conftest import invocation, tool

pytestmark = pytest.mark.usefixtures("bwrap")


@pytest.mark.slow
def test_big_output_becomes_an_artifact(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spools = tmp_path / "spools"
    spools.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spools))
    size = 5 * 1024 * 1024
    cap = 8_000
    store = SqliteStore(str(tmp_path / "plait.db"))
    runner = ToolRunner(store)
    command = f"head -c {size} /dev/zero | tr '\\0' b; echo oops >&2; exit 1"

    async def go() -> tuple[ToolResult, bytes]:
        inv = invocation("run_command", ws, cap, command=command)
        result = await runner.run(
            tool(), inv, EffectClass.SIDE_EFFECT, time_limit=60, on_cancel=lambda: None
        )
        assert result.artifact is not None
        _, data = await store.get_artifact(result.artifact.id)
        await store.close()
        return result, data

    result, data = asyncio.run(go())
    assert result.status is ToolStatus.FAILED
    content = result.content
    assert len(content.encode()) <= cap
    assert content.startswith(f"$ {command}\nexit code 1 [ended: exit")
    assert "the whole output is artifact" in content
    assert data.count(b"b") >= size
    assert data.endswith(b"\n--- stderr (5 bytes) ---\noops\n")
    assert list(spools.iterdir()) == []  # capture files and the spool are all gone
