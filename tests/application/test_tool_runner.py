"""ToolRunner: cap, spooled output moved into an artifact, failures as results."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import ArtifactStore, ToolInvocation, ToolOutput
from plait.application.tool_runner import ToolRunner
from plait.domain.errors import ConfigError, ToolError
from plait.domain.messages import ToolCall, ToolStatus
from plait.domain.tools import EffectClass
from plait.testing import RecordingTool

from .conftest import run, spec


def invocation(cap: int = 300) -> ToolInvocation:
    return ToolInvocation(
        call=ToolCall(id="c1", name="read", arguments_json='{"text":"a"}'),
        session_id="ses_1",
        run_id="run_1",
        workspace=None,
        idempotency_key="idem_1",
        output_cap_bytes=cap,
    )


def stores(tmp_path: Path) -> list[ArtifactStore]:
    return [
        MemoryStore(),
        JsonlStore(tmp_path / "jsonl"),
        SqliteStore(str(tmp_path / "s.db")),
    ]


def never_cancelled() -> None:
    raise AssertionError("not cancelled")


def test_spooled_output_becomes_an_artifact_and_the_file_is_removed(tmp_path: Path) -> None:
    body = b"line of output\n" * 5000
    for n, store in enumerate(stores(tmp_path)):
        spool = tmp_path / f"spool-{n}.txt"
        spool.write_bytes(body)
        tool = RecordingTool(
            spec("read"), output=ToolOutput(content="line of output\n" * 3, spool_path=str(spool))
        )
        runner = ToolRunner(store)
        result = run(
            runner.run(
                tool.tool,
                invocation(),
                EffectClass.READ_ONLY,
                time_limit=None,
                on_cancel=never_cancelled,
            )
        )
        assert result.status is ToolStatus.SUCCEEDED
        assert result.artifact is not None and result.artifact.size == len(body)
        assert f"{len(body)} bytes in all" in result.content
        assert len(result.content.encode()) <= 300
        assert not spool.exists()
        ref, data = run(store.get_artifact(result.artifact.id))
        assert data == body and ref == result.artifact
        run(store.close())  # type: ignore[attr-defined]


def test_the_truncation_note_counts_the_bytes_it_shows(tmp_path: Path) -> None:
    """Never "1001 bytes in all, 2000 shown" (issue 26 item 6): the note gives the bytes
    really shown, never more than there are."""
    import re

    for body, head, cap in ((b"x" * 1001, "x" * 40, 2000), (b"y" * 9000, "y" * 9000, 500)):
        spool = tmp_path / "spool.txt"
        spool.write_bytes(body)
        tool = RecordingTool(spec("read"), output=ToolOutput(content=head, spool_path=str(spool)))
        result = run(
            ToolRunner(MemoryStore()).run(
                tool.tool,
                invocation(cap),
                EffectClass.READ_ONLY,
                time_limit=None,
                on_cancel=never_cancelled,
            )
        )
        found = re.search(
            r"\[output truncated: (\d+) bytes in all, the first (\d+) shown", result.content
        )
        assert found is not None, result.content
        total, shown = int(found.group(1)), int(found.group(2))
        assert total == len(body) and shown <= total
        assert shown == len(result.content[: result.content.index("\n[output")].encode())
        assert len(result.content.encode()) <= cap


def test_a_missing_spool_file_is_a_clear_error(tmp_path: Path) -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError, match="spooled tool output"):
        run(store.put_artifact_file(str(tmp_path / "gone"), media_type="text/plain"))


def test_inline_output_over_the_cap_goes_to_an_artifact() -> None:
    store = MemoryStore()
    tool = RecordingTool(spec("read"), output="x" * 1000)
    result = run(
        ToolRunner(store).run(
            tool.tool,
            invocation(),
            EffectClass.READ_ONLY,
            time_limit=None,
            on_cancel=never_cancelled,
        )
    )
    assert result.artifact is not None and result.artifact.size == 1000
    assert run(store.get_artifact(result.artifact.id))[1] == b"x" * 1000


def test_failures_become_results() -> None:
    store = MemoryStore()
    runner = ToolRunner(store)
    failing = RecordingTool(spec("read"), raises=ToolError("no such file"))
    result = run(
        runner.run(
            failing.tool,
            invocation(),
            EffectClass.READ_ONLY,
            time_limit=None,
            on_cancel=never_cancelled,
        )
    )
    assert result.status is ToolStatus.FAILED and result.content == "no such file"
    slow = RecordingTool(spec("write", EffectClass.SIDE_EFFECT), delay=5.0)
    result = run(
        runner.run(
            slow.tool,
            invocation(),
            EffectClass.SIDE_EFFECT,
            time_limit=0.0,
            on_cancel=never_cancelled,
        )
    )
    assert result.status is ToolStatus.UNKNOWN and "timed out" in (result.reason or "")
